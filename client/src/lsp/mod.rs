//! `scafld lsp`: a Language Server over stdio, backed by the daemon. It publishes spec
//! diagnostics (of the editor's buffer, debounced) and the open findings of each task's latest
//! review, answers hover, document symbols and code lenses, and runs scafld commands. It never
//! writes a spec: every change goes through the daemon, whose events keep it current.
//!
//! One thread runs the loop below over four sources: the editor's messages (our own stdio
//! threads, `transport`), the daemon's events (`daemon::spawn_events`, and
//! `daemon::spawn_probe` saying a daemon that did not answer answers again), the debounce
//! timer and the connector's notes (a daemon it started).

mod commands;
mod daemon;
mod diagnostics;
mod documents;
mod lines;
mod outline;
mod transport;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender, select};
use lsp_server::{ErrorCode, Message, Notification, Request, RequestId, Response};
use lsp_types::{
    CodeLensOptions, CodeLensParams, DidChangeTextDocumentParams, DidCloseTextDocumentParams,
    DidOpenTextDocumentParams, DidSaveTextDocumentParams, DocumentSymbolParams, DocumentSymbolResponse,
    ExecuteCommandOptions, ExecuteCommandParams, HoverParams, HoverProviderCapability, InitializeParams,
    LogMessageParams, MessageType, OneOf, PublishDiagnosticsParams, SaveOptions, ServerCapabilities,
    TextDocumentSyncCapability, TextDocumentSyncKind, TextDocumentSyncOptions, TextDocumentSyncSaveOptions, Uri,
};
use scafld_protocol::methods::{self as m, CallerContext};
use scafld_protocol::{ErrorKind, Event, MAX_REQUEST_LINE_BYTES};
use serde::de::DeserializeOwned;

pub use daemon::{Connector, Dial, LinkError};
use daemon::{Link, LinkEvent};
use diagnostics::Published;
use documents::{Document, Documents, SpecFile, TaskKey, spec_file, uri_to_path};
use lines::LineMap;
use outline::ScafldCommand;
use transport::InputEnd;

/// What `scafld lsp` needs from the command line.
pub struct Options {
    /// Opens a daemon connection (starting the daemon when the argument allows it).
    pub connect: Connector,
    /// The environment build and review commands run with (the editor's, as it started us).
    pub caller: CallerContext,
    /// The workspace root when the editor names none (`--root`, else the nearest `.scafld/`).
    pub root: Option<PathBuf>,
    /// What the connector has to say (it started the daemon), logged to the editor: a line on
    /// stderr would reach the editor's log as an error.
    pub notes: Receiver<String>,
}

/// How the server ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// `shutdown` then `exit`.
    Clean,
    /// `exit` without `shutdown` (LSP asks for exit code 1).
    WithoutShutdown,
    /// The editor closed our stdin.
    InputClosed,
    /// The editor's input could not be split into messages any more (the reason is on stderr
    /// and in the editor's log).
    Unframed,
}

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Exit::Clean | Exit::InputClosed => 0,
            Exit::WithoutShutdown | Exit::Unframed => 1,
        }
    }
}

/// A workspace root as the editor names it, and as the daemon does (canonical).
#[derive(Debug, Clone)]
struct Root {
    path: PathBuf,
    canonical: PathBuf,
}

/// Serve LSP on stdin/stdout until the editor exits or closes stdin.
pub fn run(options: Options) -> Result<Exit, String> {
    let stdio = transport::stdio().map_err(|e| format!("cannot start a thread: {e}"))?;
    let connection = &stdio.connection;
    let (id, params) = match await_initialize(connection) {
        Handshake::Go(start) => start,
        Handshake::Exit => return Ok(Exit::WithoutShutdown),
        // The input ended (the reader thread is done): say why.
        Handshake::Ended => {
            return Ok(match stdio.input_end() {
                InputEnd::Closed => {
                    safe_eprintln("no initialize request (the input closed)");
                    Exit::InputClosed
                }
                InputEnd::Unframed(_) => Exit::Unframed,
            });
        }
    };
    let init: InitializeParams = match serde_json::from_value(params) {
        Ok(init) => init,
        Err(e) => {
            let message = format!("bad initialize params: {e}");
            let refusal = Response::new_err(id, ErrorCode::InvalidParams as i32, message.clone());
            let _ = connection.sender.send(refusal.into());
            return Err(message);
        }
    };
    let capabilities = ServerCapabilities {
        text_document_sync: Some(TextDocumentSyncCapability::Options(TextDocumentSyncOptions {
            open_close: Some(true),
            change: Some(TextDocumentSyncKind::FULL),
            save: Some(TextDocumentSyncSaveOptions::SaveOptions(SaveOptions { include_text: Some(true) })),
            ..TextDocumentSyncOptions::default()
        })),
        hover_provider: Some(HoverProviderCapability::Simple(true)),
        document_symbol_provider: Some(OneOf::Left(true)),
        code_lens_provider: Some(CodeLensOptions { resolve_provider: Some(false) }),
        execute_command_provider: Some(ExecuteCommandOptions {
            commands: ScafldCommand::ALL.iter().map(|c| c.name().to_string()).collect(),
            ..ExecuteCommandOptions::default()
        }),
        ..ServerCapabilities::default()
    };
    let result = serde_json::json!({
        "capabilities": capabilities,
        "serverInfo": {"name": "scafld", "version": env!("CARGO_PKG_VERSION")},
    });
    let (events_tx, events_rx) = crossbeam_channel::unbounded();
    daemon::spawn_events(options.connect.clone(), events_tx.clone())
        .map_err(|e| format!("cannot start a thread: {e}"))?;
    // Answered once the daemon's events are followed (or the first attempt failed), so that no
    // change made after the editor has its answer goes unseen; bounded, so that a hung daemon
    // cannot hold the editor.
    let first_event = events_rx.recv_timeout(daemon::SUBSCRIBE_WAIT).ok();
    let _ = connection.sender.send(Response::new_ok(id, result).into());
    let early = match await_initialized(connection) {
        Handshake::Go(early) => early,
        Handshake::Exit => return Ok(Exit::WithoutShutdown),
        Handshake::Ended => {
            return Ok(match stdio.input_end() {
                InputEnd::Unframed(_) => Exit::Unframed,
                InputEnd::Closed => Exit::InputClosed,
            });
        }
    };

    let mut server = Server {
        out: connection.sender.clone(),
        link: Link::with_timeout(options.connect.clone(), daemon::REQUEST_TIMEOUT),
        connect: options.connect,
        caller: options.caller,
        roots: Vec::new(),
        docs: Documents::default(),
        published: Published::default(),
        shutdown: false,
        progress: init.capabilities.window.as_ref().and_then(|w| w.work_done_progress).unwrap_or(false),
        grants: commands::Grants::default(),
        events: events_tx,
        owed: false,
        probing: false,
    };
    for root in initial_roots(&init).into_iter().chain(options.root) {
        let _ = server.add_root(&root);
    }
    let subscribed = matches!(first_event, Some(LinkEvent::Connected));
    if let Some(event) = first_event {
        server.on_link(event);
    }
    if !subscribed {
        // Nobody answered: start a daemon for the events thread to subscribe to (its next try
        // is milliseconds away). Everything is read once it has (`LinkEvent::Connected`).
        let started = server.link.ensure().map(|_| ());
        server.report(started, || "reach the daemon".into());
    }
    // What the editor sent before `initialized`, served now, in order.
    for message in early {
        if let Some(exit) = server.on_message(message) {
            return Ok(exit);
        }
    }
    let exit = server.main_loop(&connection.receiver, &events_rx, &options.notes);
    Ok(match exit {
        Exit::InputClosed if matches!(stdio.input_end(), InputEnd::Unframed(_)) => Exit::Unframed,
        exit => exit,
    })
}

/// How a step of the LSP handshake ended.
enum Handshake<T> {
    /// It is done: what it read.
    Go(T),
    /// The editor sent `exit` (status 1: no `shutdown` came).
    Exit,
    /// The input ended.
    Ended,
}

/// LSP's -32002 ServerNotInitialized.
const SERVER_NOT_INITIALIZED: i32 = ErrorCode::ServerNotInitialized as i32;

/// A method name quoted in an answer: its first 80 characters.
fn method_named(method: &str) -> String {
    method.chars().take(80).collect()
}

/// Wait for `initialize`: a request before it is refused with -32002 "server not initialized"
/// naming its method (never its params), a notification dropped (as LSP says), a response
/// ignored; `exit` ends the server.
fn await_initialize(connection: &lsp_server::Connection) -> Handshake<(RequestId, serde_json::Value)> {
    loop {
        match connection.receiver.recv() {
            Err(_) => return Handshake::Ended,
            Ok(Message::Request(request)) if request.method == "initialize" => {
                return Handshake::Go((request.id, request.params));
            }
            Ok(Message::Request(request)) => {
                let message =
                    format!("server not initialized: {} came before initialize", method_named(&request.method));
                let _ = connection.sender.send(Response::new_err(request.id, SERVER_NOT_INITIALIZED, message).into());
            }
            Ok(Message::Notification(n)) if n.method == "exit" => return Handshake::Exit,
            Ok(_) => {}
        }
    }
}

/// Wait for `initialized` once `initialize` is answered, keeping what else came meanwhile for
/// the server to serve after it (an editor should send nothing before it, but a message that
/// did come is not lost); another `initialize` is refused with -32600 "already initialized".
/// A `shutdown` ends the wait too: the editor waits for its answer, not to send `initialized`,
/// and the `exit` after it is then a clean one.
fn await_initialized(connection: &lsp_server::Connection) -> Handshake<Vec<Message>> {
    let mut early = Vec::new();
    loop {
        match connection.receiver.recv() {
            Err(_) => return Handshake::Ended,
            Ok(Message::Notification(n)) if n.method == "initialized" => return Handshake::Go(early),
            Ok(Message::Notification(n)) if n.method == "exit" => return Handshake::Exit,
            Ok(Message::Request(request)) if request.method == "shutdown" => {
                early.push(Message::Request(request));
                return Handshake::Go(early);
            }
            Ok(Message::Request(request)) if request.method == "initialize" => {
                let _ = connection.sender.send(already_initialized(request.id).into());
            }
            Ok(message) => early.push(message),
        }
    }
}

/// The answer to an `initialize` after the first: -32600 Invalid Request, as LSP says.
fn already_initialized(id: RequestId) -> Response {
    Response::new_err(id, ErrorCode::InvalidRequest as i32, "already initialized: initialize is sent once".into())
}

/// A line on stderr (the editor's log, or a terminal when run by hand), made safe for a
/// terminal.
fn safe_eprintln(message: &str) {
    eprintln!("scafld lsp: {}", crate::terminal::terminal_safe(message, false));
}

/// The workspace folders of `initialize` (or its older `rootUri`).
fn initial_roots(init: &InitializeParams) -> Vec<PathBuf> {
    let folders: Vec<PathBuf> = init.workspace_folders.iter().flatten().filter_map(|f| uri_to_path(&f.uri)).collect();
    if !folders.is_empty() {
        return folders;
    }
    #[allow(deprecated)] // the only root older clients (Neovim 0.7) send without folders
    init.root_uri.as_ref().and_then(uri_to_path).into_iter().collect()
}

struct Server {
    out: Sender<Message>,
    /// Requests of this thread (reads, checks).
    link: Link,
    connect: Connector,
    caller: CallerContext,
    roots: Vec<Root>,
    docs: Documents,
    published: Published,
    shutdown: bool,
    /// Whether the editor takes `window/workDoneProgress/create`.
    progress: bool,
    /// Its answers to those, for the commands awaiting them.
    grants: commands::Grants,
    /// Where the probe reports (the events' channel).
    events: Sender<LinkEvent>,
    /// Whether a read of the server's own failed because the daemon did not answer (a buffer's
    /// check, a save's, an event's read): what the editor shows may be stale until it is all
    /// read again, once the daemon answers.
    owed: bool,
    /// Whether a probe is waiting for the daemon to answer.
    probing: bool,
}

impl Server {
    fn main_loop(
        &mut self,
        editor: &Receiver<Message>,
        events: &Receiver<LinkEvent>,
        notes: &Receiver<String>,
    ) -> Exit {
        loop {
            let timer = match self.docs.next_due() {
                Some(due) => crossbeam_channel::at(due),
                None => crossbeam_channel::never(),
            };
            select! {
                recv(editor) -> message => match message {
                    Ok(message) => {
                        if let Some(exit) = self.on_message(message) {
                            return exit;
                        }
                    }
                    // lsp-server's reader ended: stdin closed.
                    Err(_) => return Exit::InputClosed,
                },
                recv(events) -> event => {
                    if let Ok(event) = event {
                        self.on_link(event);
                    }
                }
                recv(notes) -> note => {
                    if let Ok(note) = note {
                        self.log(MessageType::INFO, note);
                    }
                }
                recv(timer) -> _ => {
                    for doc in self.docs.take_due(Instant::now()) {
                        self.check_buffer(&doc);
                    }
                }
            }
        }
    }

    fn send(&self, message: impl Into<Message>) {
        let _ = self.out.send(message.into());
    }

    /// Log to the editor (`window/logMessage`); an error goes to stderr too. Neovim 0.7 logs
    /// every stderr line as an error, so nothing routine goes there.
    fn log(&self, typ: MessageType, message: String) {
        if typ == MessageType::ERROR {
            safe_eprintln(&message);
        }
        self.send(Notification::new("window/logMessage".into(), LogMessageParams { typ, message }));
    }

    /// Remember a workspace root (once per canonical path); the root when it is new.
    fn add_root(&mut self, path: &Path) -> Option<Root> {
        let canonical = path.canonicalize().ok()?;
        if self.roots.iter().any(|r| r.canonical == canonical) {
            return None;
        }
        let root = Root { path: path.to_path_buf(), canonical };
        self.roots.push(root.clone());
        Some(root)
    }

    /// The known root whose canonical path is `canonical`.
    fn root(&self, canonical: &Path) -> Option<Root> {
        self.roots.iter().find(|r| r.canonical == canonical).cloned()
    }

    /// Log a failed read of the daemon (what was being read, and why). One that failed because
    /// the daemon did not answer is owed: everything is read again once it answers.
    fn report(&mut self, result: Result<(), LinkError>, what: impl FnOnce() -> String) {
        if let Err(e) = result {
            if matches!(e, LinkError::Unavailable(_) | LinkError::TimedOut(_)) {
                self.reread_once_answering();
            }
            self.log(MessageType::WARNING, format!("cannot {}: {e}", what()));
        }
    }

    /// Owe a re-read of everything, and start a probe (unless one runs) to say when the daemon
    /// answers: a hung daemon keeps the events' subscription, so no reconnection would say it.
    fn reread_once_answering(&mut self) {
        self.owed = true;
        if !self.probing {
            match daemon::spawn_probe(self.connect.clone(), self.events.clone()) {
                Ok(()) => self.probing = true,
                Err(e) => self.log(MessageType::ERROR, format!("cannot start a thread: {e}")),
            }
        }
    }

    // --- editor messages -------------------------------------------------------------------

    fn on_message(&mut self, message: Message) -> Option<Exit> {
        match message {
            Message::Request(request) => {
                self.on_request(request);
                None
            }
            // Answers to our `window/workDoneProgress/create`, for the command awaiting one.
            Message::Response(response) => {
                self.grants.answer(&response);
                None
            }
            Message::Notification(n) if n.method == "exit" => {
                Some(if self.shutdown { Exit::Clean } else { Exit::WithoutShutdown })
            }
            Message::Notification(n) => {
                self.on_notification(n);
                None
            }
        }
    }

    fn on_request(&mut self, request: Request) {
        let id = request.id.clone();
        if self.shutdown {
            return self.send(Response::new_err(id, ErrorCode::InvalidRequest as i32, "shutting down".into()));
        }
        let answer: Result<serde_json::Value, (i32, String)> = match request.method.as_str() {
            "initialize" => return self.send(already_initialized(id)),
            "shutdown" => {
                self.shutdown = true;
                Ok(serde_json::Value::Null)
            }
            "textDocument/hover" => params::<HoverParams>(request).and_then(|p| self.hover(p)),
            "textDocument/documentSymbol" => params::<DocumentSymbolParams>(request).and_then(|p| self.symbols(p)),
            "textDocument/codeLens" => params::<CodeLensParams>(request).map(|p| {
                let is_spec = uri_to_path(&p.text_document.uri).and_then(|path| spec_file(&path)).is_some();
                let lenses = if is_spec { outline::lenses(&p.text_document.uri) } else { Vec::new() };
                serde_json::to_value(lenses).unwrap_or_default()
            }),
            "workspace/executeCommand" => match params::<ExecuteCommandParams>(request).and_then(|p| self.command(p)) {
                // Answered by the command's thread.
                Ok(job) => {
                    return commands::spawn(
                        job.with(id),
                        self.connect.clone(),
                        self.caller.clone(),
                        self.out.clone(),
                        self.grants.clone(),
                    );
                }
                // Shown too: an editor shows no command's error answer.
                Err((code, message)) => {
                    commands::show(&self.out, MessageType::ERROR, message.clone());
                    Err((code, message))
                }
            },
            other => Err((ErrorCode::MethodNotFound as i32, format!("scafld lsp does not handle {other}"))),
        };
        self.send(match answer {
            Ok(value) => Response::new_ok(id, value),
            Err((code, message)) => Response::new_err(id, code, message),
        });
    }

    fn on_notification(&mut self, n: Notification) {
        match n.method.as_str() {
            "textDocument/didOpen" => {
                let Ok(p) = n.extract::<DidOpenTextDocumentParams>("textDocument/didOpen") else { return };
                // Whatever was published for this file moves to the editor's spelling of its URI.
                if let Some(path) = self.docs.spelled_as(&p.text_document.uri) {
                    let touched = self.published.respell(&path, &p.text_document.uri);
                    self.publish(touched, false);
                }
                if let Some(doc) = self.docs.open(p.text_document.uri, p.text_document.text).cloned() {
                    if let Some(root) = self.add_root(&doc.spec.root) {
                        // A workspace new to the server: its broken specs and its findings.
                        let mut read: BTreeSet<TaskKey> = self.docs.all().map(|d| d.key.clone()).collect();
                        let read =
                            self.refresh_root_specs(&root, &mut read).and_then(|()| self.refresh_root_findings(&root));
                        self.report(read, || format!("read the workspace {}", root.path.display()));
                    }
                    self.check_buffer(&doc);
                }
            }
            "textDocument/didChange" => {
                let Ok(p) = n.extract::<DidChangeTextDocumentParams>("textDocument/didChange") else { return };
                // Full sync: the last change holds the whole text.
                if let Some(change) = p.content_changes.into_iter().last() {
                    self.docs.change(&p.text_document.uri, change.text, Instant::now());
                }
            }
            "textDocument/didSave" => {
                let Ok(p) = n.extract::<DidSaveTextDocumentParams>("textDocument/didSave") else { return };
                let Some(doc) = self.docs.saved(&p.text_document.uri, p.text).cloned() else { return };
                // Saved, the buffer shows the file: the file's diagnostics, as written (the editor
                // may have written other bytes than its text: another encoding, say), published
                // last, over a check of the edited buffer the file's change event may have led to.
                match self.root(&doc.key.0) {
                    Some(root) => {
                        let read = self.refresh_spec(&root, &doc.key.1, true);
                        self.report(read, || format!("validate {}", doc.uri.as_str()));
                    }
                    None => self.check_buffer(&doc),
                }
            }
            "textDocument/didClose" => {
                let Ok(p) = n.extract::<DidCloseTextDocumentParams>("textDocument/didClose") else { return };
                self.docs.closed(&p.text_document.uri);
                let Some(doc) = self.docs.close(&p.text_document.uri) else { return };
                // The file's diagnostics replace the buffer's; none when it cannot be read.
                let read = match self.root(&doc.key.0) {
                    Some(root) => self.refresh_spec(&root, &doc.key.1, false),
                    None => Err(LinkError::Unavailable("its workspace is unknown".into())),
                };
                if read.is_err() {
                    let touched = self.published.forget(&doc.key, &doc.uri);
                    self.publish(touched, false);
                }
                self.report(read, || format!("validate {}", doc.uri.as_str()));
            }
            _ => {}
        }
    }

    // --- daemon events ---------------------------------------------------------------------

    /// Reads on the server's own account: none starts a daemon. A daemon stopped (or crashed)
    /// while one was under way, its connection broken, stays stopped: the retry of the read
    /// finds none and fails, and the next request of the editor's that needs one starts it.
    fn on_link(&mut self, event: LinkEvent) {
        let autostart = self.link.set_autostart(false);
        self.on_link_event(event);
        self.link.set_autostart(autostart);
    }

    fn on_link_event(&mut self, event: LinkEvent) {
        match event {
            // Whatever changed while we were not listening: read it all again (which pays
            // what a read the daemon did not answer owed).
            LinkEvent::Connected => {
                self.owed = false;
                self.refresh_all(true);
            }
            // As after a reconnection, if a read is still owed.
            LinkEvent::Answering => {
                self.probing = false;
                if std::mem::take(&mut self.owed) {
                    self.refresh_all(true);
                }
            }
            LinkEvent::Lost(why) => {
                self.log(MessageType::WARNING, format!("lost the daemon ({why}); reconnecting"));
            }
            LinkEvent::Event(Event::TaskChanged { root, task_id, .. }) => {
                let Some(root) = self.root(Path::new(&root)) else { return };
                let read =
                    self.refresh_spec(&root, &task_id, false).and_then(|()| self.refresh_findings(&root, &task_id));
                self.report(read, || format!("read task {task_id}"));
            }
            LinkEvent::Event(Event::EventsLagged { .. }) => self.refresh_all(false),
            LinkEvent::Event(_) => {}
        }
    }

    // --- publishing ------------------------------------------------------------------------

    /// Publish the lists of `uris`, each once (a list that stays on its URI is touched twice).
    fn publish(&mut self, mut uris: Vec<Uri>, force: bool) {
        let mut seen = std::collections::HashSet::new();
        uris.retain(|uri| seen.insert(uri.as_str().to_string()));
        for uri in uris {
            if let Some(diagnostics) = self.published.compose(&uri, force) {
                let params = PublishDiagnosticsParams { uri, diagnostics, version: None };
                self.send(Notification::new("textDocument/publishDiagnostics".into(), params));
            }
        }
    }

    /// [`Server::check_buffer_or_fail`], a failure logged.
    fn check_buffer(&mut self, doc: &Document) {
        let checked = self.check_buffer_or_fail(doc);
        self.report(checked, || format!("check {}", doc.uri.as_str()));
    }

    /// Check an open buffer's text and publish its diagnostics (always, even none), beside
    /// those of the task's other open buffers.
    fn check_buffer_or_fail(&mut self, doc: &Document) -> Result<(), LinkError> {
        let diagnostics = self.buffer_diagnostics(doc)?;
        let open: Vec<Uri> = self.docs.of_task(&doc.key).into_iter().map(|d| d.uri).collect();
        let touched = self.published.set_buffer(doc.key.clone(), doc.uri.clone(), diagnostics, &open);
        // The editor expects an answer for the buffer, even an empty one; a URI the task's
        // list moves away from gets one only if it showed something.
        let (buffer, vacated): (Vec<Uri>, Vec<Uri>) = touched.into_iter().partition(|uri| *uri == doc.uri);
        self.publish(vacated, false);
        self.publish(buffer, true);
        Ok(())
    }

    /// The diagnostics of an open buffer's text (a refusal of the daemon's is one, on its
    /// first line).
    fn buffer_diagnostics(&mut self, doc: &Document) -> Result<Vec<lsp_types::Diagnostic>, LinkError> {
        let params = m::CheckParams {
            root: doc.spec.root.display().to_string(),
            task_id: doc.spec.task_id.clone(),
            text: Some(doc.text.clone()),
        };
        if let Some(message) = too_big(&params) {
            return Ok(vec![problem(message)]);
        }
        match self.link.call::<m::TaskCheck>(&params) {
            Ok(result) => Ok(spec_diagnostics(&result, &LineMap::of(doc.text.as_bytes()))),
            // The daemon refuses the file itself (a bad task id, an unknown workspace): say so on it.
            Err(LinkError::Refused { message, .. }) => Ok(vec![problem(message)]),
            Err(e) => Err(e),
        }
    }

    /// Publish a task's spec diagnostics: each open buffer with unsaved edits shows its own
    /// text's, each other one (or, with none open, the root the editor named) the file's as it
    /// reads on disk, at the file's path under the root that buffer names (the editor may
    /// name the workspace through another path; a moved spec clears its old URI).
    fn refresh_spec(&mut self, root: &Root, task_id: &str, force: bool) -> Result<(), LinkError> {
        let key: TaskKey = (root.canonical.clone(), task_id.to_string());
        let open = self.docs.of_task(&key);
        let mut lists = Vec::new();
        let mut named_by: Vec<&Path> =
            open.iter().filter(|doc| !doc.dirty).map(|doc| doc.spec.root.as_path()).collect();
        if open.is_empty() {
            named_by.push(&root.path);
        }
        if !named_by.is_empty() {
            let params = m::CheckParams { root: root.path.display().to_string(), task_id: task_id.into(), text: None };
            match self.link.call::<m::TaskCheck>(&params) {
                Ok(result) => {
                    // The file's diagnostics, on the file's lines.
                    let file = root.path.join(&result.path);
                    let diagnostics = spec_diagnostics(&result, &LineMap::of_file(&file));
                    for named_by in named_by {
                        if let Some(uri) = self.docs.uri_of(&named_by.join(&result.path)) {
                            lists.push((uri, diagnostics.clone()));
                        }
                    }
                }
                Err(LinkError::Refused { kind: ErrorKind::NotFound, .. }) => {}
                Err(e) => return Err(e),
            }
        }
        for doc in open.iter().filter(|doc| doc.dirty) {
            lists.push((doc.uri.clone(), self.buffer_diagnostics(doc)?));
        }
        let touched = self.published.set_spec(key, lists);
        self.publish(touched, force);
        Ok(())
    }

    fn refresh_findings(&mut self, root: &Root, task_id: &str) -> Result<(), LinkError> {
        let key: TaskKey = (root.canonical.clone(), task_id.to_string());
        let params = m::TaskParams { root: root.path.display().to_string(), task_id: task_id.into() };
        let found = match self.link.call::<m::TaskStatus>(&m::StatusParams::plain(params)) {
            Ok(status) => diagnostics::findings(
                &root.path,
                &root.path.join(&status.path),
                &status,
                |p| self.docs.uri_of(p),
                LineMap::of_file,
            ),
            Err(LinkError::Refused { .. }) => Vec::new(),
            Err(e) => return Err(e),
        };
        let touched = self.published.set_findings(key, found);
        self.publish(touched, false);
        Ok(())
    }

    /// The findings of every task of a root that may have some (one `task.status` each).
    fn refresh_root_findings(&mut self, root: &Root) -> Result<(), LinkError> {
        let params = m::ListParams { root: root.path.display().to_string(), status: None, counts: false };
        let list = match self.link.call::<m::TaskList>(&params) {
            Ok(list) => list,
            // Not a scafld workspace (yet): nothing to show.
            Err(LinkError::Refused { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        for task in list.tasks.into_iter().filter(|t| diagnostics::may_have_findings(&t.status)) {
            self.refresh_findings(root, &task.task_id)?;
        }
        Ok(())
    }

    /// Publish the file's list of each spec of `root` that has something to say and that no
    /// buffer holds nor anything read already (`read`, which gains them): a spec broken before
    /// the server started, or while no daemon ran, is told by no event (a daemon indexing its
    /// workspace announces nothing), so the whole workspace is read, as `scafld validate --all`
    /// reads it, in one call. A clean spec gets no list: nothing showed one to clear.
    fn refresh_root_specs(&mut self, root: &Root, read: &mut BTreeSet<TaskKey>) -> Result<(), LinkError> {
        let params = m::WorkspaceRootParams { root: root.path.display().to_string() };
        let all = match self.link.call::<m::TaskValidateAll>(&params) {
            Ok(all) => all,
            // Not a scafld workspace (yet): nothing to show.
            Err(LinkError::Refused { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        for spec in all.specs.into_iter().filter(|spec| !spec.diagnostics.is_empty()) {
            let key: TaskKey = (root.canonical.clone(), spec.task_id);
            if !read.insert(key.clone()) {
                continue;
            }
            let file = root.path.join(&spec.path);
            let Some(uri) = self.docs.uri_of(&file) else { continue };
            let lines = LineMap::of_file(&file);
            let diagnostics = spec.diagnostics.iter().map(|d| diagnostics::spec_diagnostic(d, &lines)).collect();
            let touched = self.published.set_spec(key, vec![(uri, diagnostics)]);
            self.publish(touched, false);
        }
        Ok(())
    }

    /// Re-read everything shown, and every spec with problems: every open buffer, every spec
    /// whose diagnostics are shown, every other spec of a root that has something to say
    /// (whenever it went wrong) and every root's findings. `force` republishes even unchanged
    /// lists (after a reconnection the editor is told again), but only once everything was read
    /// again: a list that could not be checked is never sent anew as if it had been.
    fn refresh_all(&mut self, force: bool) {
        let read = self.refresh_all_or_fail();
        let reread = read.is_ok();
        self.report(read, || "read the workspace".into());
        if force && reread {
            let uris = self.published.uris();
            self.publish(uris, true);
        }
    }

    /// [`Server::refresh_all`]'s reads; the first failure ends them (a daemon that did not
    /// answer one would not answer the next either).
    fn refresh_all_or_fail(&mut self) -> Result<(), LinkError> {
        // An edited buffer is what the editor shows: its text is checked. A saved one shows the
        // file, which may have changed while no events came: the file is read, as an event
        // about it would have.
        let docs: Vec<Document> = self.docs.all().cloned().collect();
        let mut refreshed = BTreeSet::new();
        for doc in docs {
            match self.root(&doc.key.0) {
                // Every open buffer of the task at once.
                Some(root) => {
                    if refreshed.insert(doc.key.clone()) {
                        self.refresh_spec(&root, &doc.key.1, true)?;
                    }
                }
                None => self.check_buffer_or_fail(&doc)?,
            }
        }
        // A spec no buffer holds shows the file's list as an event last had it checked; the
        // file may have changed since (edited while no daemon ran, which no event reports): it
        // is checked again, never shown as it was.
        for key in self.published.tasks_with_spec() {
            if let Some(root) = self.root(&key.0)
                && refreshed.insert(key.clone())
            {
                self.refresh_spec(&root, &key.1, false)?;
            }
        }
        let before = self.published.tasks_with_findings();
        for root in self.roots.clone() {
            self.refresh_root_specs(&root, &mut refreshed)?;
            self.refresh_root_findings(&root)?;
        }
        // A task gone from the list (removed while we were away) keeps no findings.
        for (canonical, task_id) in before {
            if let Some(root) = self.root(&canonical) {
                self.refresh_findings(&root, &task_id)?;
            }
        }
        Ok(())
    }

    // --- requests --------------------------------------------------------------------------

    /// The spec behind a request's document: its buffer (or file) text, its structure and,
    /// when the daemon knows the task, its status. `None` for a document that is no spec (any
    /// Markdown file, where an editor runs us on every one): nothing to say of it, no error.
    fn spec_of(&mut self, uri: &Uri) -> Result<Option<SpecView>, (i32, String)> {
        let Some((path, spec)) = uri_to_path(uri).and_then(|path| spec_file(&path).map(|spec| (path, spec))) else {
            return Ok(None);
        };
        let text = match self.docs.get(uri) {
            Some(doc) => doc.text.clone(),
            // Not UTF-8 on disk: its text as the editor would show it (invalid bytes replaced).
            None => std::fs::read(&path)
                .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
                .map_err(|e| (REQUEST_FAILED, format!("cannot read {}: {e}", path.display())))?,
        };
        let root = spec.root.display().to_string();
        let params = m::CheckParams { root: root.clone(), task_id: spec.task_id.clone(), text: Some(text.clone()) };
        if let Some(message) = too_big(&params) {
            return Err((REQUEST_FAILED, message));
        }
        let structure = self.link.call::<m::TaskCheck>(&params).map_err(failed)?;
        let status = self
            .link
            .call::<m::TaskStatus>(&m::StatusParams::plain(m::TaskParams { root, task_id: spec.task_id }))
            .ok();
        Ok(Some((text, structure, status)))
    }

    /// Hover: `null` off a spec.
    fn hover(&mut self, p: HoverParams) -> Result<serde_json::Value, (i32, String)> {
        let uri = p.text_document_position_params.text_document.uri;
        let line = p.text_document_position_params.position.line;
        let Some((text, structure, status)) = self.spec_of(&uri)? else { return Ok(serde_json::Value::Null) };
        Ok(serde_json::to_value(outline::hover(&structure, status.as_ref(), &text, line)).unwrap_or_default())
    }

    /// The outline: `[]` off a spec.
    fn symbols(&mut self, p: DocumentSymbolParams) -> Result<serde_json::Value, (i32, String)> {
        let Some((text, structure, _)) = self.spec_of(&p.text_document.uri)? else {
            return Ok(serde_json::json!([]));
        };
        let symbols = DocumentSymbolResponse::Nested(outline::symbols(&structure, &text));
        Ok(serde_json::to_value(symbols).unwrap_or_default())
    }

    fn command(&mut self, p: ExecuteCommandParams) -> Result<PendingJob, (i32, String)> {
        let invalid = |message: String| (ErrorCode::InvalidParams as i32, message);
        let command =
            ScafldCommand::parse(&p.command).ok_or_else(|| invalid(format!("unknown command {}", p.command)))?;
        let uri = p
            .arguments
            .first()
            .and_then(|a| a.as_str().or_else(|| a.get("uri").and_then(|u| u.as_str())))
            .and_then(|u| u.parse::<Uri>().ok())
            .ok_or_else(|| invalid(format!("{} takes the spec's URI as its argument", p.command)))?;
        let spec = uri_to_path(&uri)
            .and_then(|path| spec_file(&path))
            .ok_or_else(|| invalid(format!("{} is not a scafld spec", uri.as_str())))?;
        Ok(PendingJob { command, spec, progress: self.progress && command.is_long() })
    }
}

/// A spec as a request sees it: its text, its structure and its status (when the daemon
/// knows the task).
type SpecView = (String, m::ValidateResult, Option<m::StatusResult>);

/// A command ready to run once its request id is attached.
struct PendingJob {
    command: ScafldCommand,
    spec: SpecFile,
    progress: bool,
}

impl PendingJob {
    fn with(self, request: RequestId) -> commands::Job {
        commands::Job { request, command: self.command, spec: self.spec, progress: self.progress }
    }
}

use commands::REQUEST_FAILED;

fn failed(error: LinkError) -> (i32, String) {
    (REQUEST_FAILED, error.to_string())
}

/// A request's params as `P`, or -32602 with serde's reason as a sentence an editor shows
/// ("invalid params for textDocument/hover: missing field `textDocument`").
fn params<P: DeserializeOwned>(request: Request) -> Result<P, (i32, String)> {
    serde_json::from_value::<P>(request.params)
        .map_err(|e| (ErrorCode::InvalidParams as i32, format!("invalid params for {}: {e}", request.method)))
}

/// Room a request's JSON-RPC envelope (`jsonrpc`, `id`, `method`) takes around its params.
const ENVELOPE_BYTES: usize = 128;

/// Why the daemon cannot check `params`' text, if it cannot: more than `task.check` takes, or
/// a request line longer than the daemon reads once the text is escaped as JSON (a quote, a
/// backslash or a control character takes 2 to 6 bytes there, so a buffer under the size
/// limit can still be too long to send; the daemon would discard it unread).
fn too_big(params: &m::CheckParams) -> Option<String> {
    let text = params.text.as_deref()?;
    if text.len() > m::MAX_CHECK_TEXT_BYTES {
        return Some(format!("this spec is {} bytes; scafld checks at most {}", text.len(), m::MAX_CHECK_TEXT_BYTES));
    }
    // Six bytes a byte is the worst escaping: below that, no need to measure.
    let worst = 6 * (text.len() + params.root.len() + params.task_id.len()) + ENVELOPE_BYTES;
    if worst <= MAX_REQUEST_LINE_BYTES {
        return None;
    }
    let json = scafld_protocol::json::encoded_len(params) + ENVELOPE_BYTES;
    (json > MAX_REQUEST_LINE_BYTES).then(|| {
        format!(
            "this spec is {} bytes but {json} as JSON (quotes, backslashes and control characters are escaped); \
             scafld checks a spec whose request fits in {MAX_REQUEST_LINE_BYTES} bytes",
            text.len()
        )
    })
}

/// A problem with the whole file, on its first line.
fn problem(message: String) -> lsp_types::Diagnostic {
    diagnostics::spec_diagnostic(&m::Diagnostic { line: 0, severity: m::Severity::Error, message }, &LineMap::default())
}

/// A check's diagnostics, on the editor's lines of the text checked.
fn spec_diagnostics(checked: &m::ValidateResult, lines: &LineMap) -> Vec<lsp_types::Diagnostic> {
    checked.diagnostics.iter().map(|d| diagnostics::spec_diagnostic(d, lines)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A buffer under the size limit whose JSON is longer than the daemon's request line gets
    /// the size message, never a request the daemon would discard.
    #[test]
    fn a_buffer_is_measured_as_the_json_it_would_be_sent_as() {
        let params = |text: String| m::CheckParams { root: "/w".into(), task_id: "t".into(), text: Some(text) };
        assert_eq!(too_big(&params("x".repeat(6 << 20))), None);
        for escaped in ["\"", "\u{1}"] {
            let message = too_big(&params(escaped.repeat(6 << 20))).expect("too long as JSON");
            assert!(message.contains("as JSON") && message.contains(&MAX_REQUEST_LINE_BYTES.to_string()), "{message}");
        }
        let over = too_big(&params("x".repeat(m::MAX_CHECK_TEXT_BYTES + 1))).unwrap();
        assert!(over.contains("scafld checks at most 8388608"), "{over}");
        assert_eq!(scafld_protocol::json::encoded_len(&"a\"b"), 6);
    }
}
