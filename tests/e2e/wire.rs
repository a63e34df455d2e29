//! The wire contract, exercised with a raw socket + serde_json client.

use scafld_tests::{RawClient, TestEnv};
use serde_json::json;

#[test]
fn raw_client_calls_methods_and_pipelines() {
    let mut env = TestEnv::new();
    env.start_daemon();
    let mut client = env.client();
    let version = scafld_protocol::PROTOCOL_VERSION;
    let hello = client.result("daemon.hello", json!({"protocol_version": version, "client_version": "raw"}));
    assert_eq!(hello["protocol_version"], version);

    // Three requests written back to back; every reply arrives, matched by id.
    client.send_line(
        r#"{"jsonrpc":"2.0","id":"a","method":"daemon.status"}
{"jsonrpc":"2.0","id":"b","method":"workspace.list","params":{}}
{"jsonrpc":"2.0","id":"c","method":"daemon.hello","params":{"protocol_version":1,"client_version":"x"}}"#,
    );
    let mut ids: Vec<String> = (0..3).map(|_| client.read()["id"].as_str().unwrap().to_string()).collect();
    ids.sort();
    assert_eq!(ids, ["a", "b", "c"]);

    let status = client.result("daemon.status", json!({}));
    for key in [
        "daemon_version",
        "protocol_version",
        "pid",
        "uptime_seconds",
        "socket_path",
        "state_dir",
        "workspaces",
        "jobs",
    ] {
        assert!(status.get(key).is_some(), "daemon.status lacks {key}: {status}");
    }
    assert_eq!(status["socket_path"], env.socket.display().to_string());
}

#[test]
fn a_long_call_does_not_hold_back_the_calls_pipelined_behind_it() {
    let mut env = TestEnv::new();
    env.start_daemon();
    let mut client = env.client();
    // A claim that waits for review work (there is none) and a status call, on one connection:
    // the status is answered while the claim still waits.
    let caller = json!({"cwd": "/", "env": {}});
    let claim = json!({"jsonrpc": "2.0", "id": "claim", "method": "worker.claim",
        "params": {"worker_id": "w", "provider": "agent", "caller": caller, "timeout_seconds": 60}});
    client.send_line(&claim.to_string());
    client.send_line(r#"{"jsonrpc":"2.0","id":"status","method":"daemon.status"}"#);
    let first = client.read();
    assert_eq!(first["id"], "status", "{first}");
    // The connection stays usable meanwhile.
    assert!(client.result("daemon.status", json!({}))["pid"].is_number());
}

#[test]
fn garbage_unknown_methods_and_bad_params_get_errors_and_the_connection_survives() {
    let mut env = TestEnv::new();
    env.start_daemon();
    let mut client = env.client();

    client.send_line("this is not json");
    let reply = client.read();
    assert_eq!(reply["error"]["code"], -32700, "{reply}");
    assert_eq!(reply["id"], json!(null));
    assert_eq!(reply["error"]["data"]["kind"], "parse_error");

    client.send_line(r#"{"jsonrpc":"2.0","id":7}"#);
    let reply = client.read();
    assert_eq!(reply["error"]["code"], -32600, "{reply}");
    assert_eq!(reply["id"], 7);

    let reply = client.call("no.such_method", json!({}));
    assert_eq!(reply["error"]["code"], -32601, "{reply}");

    let reply = client.call("workspace.open", json!({"root": 42}));
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(message.contains("invalid type: integer `42`, expected a string"), "serde message missing: {message}");

    let reply = client.call("daemon.status", json!({"unexpected": true}));
    assert_eq!(reply["error"]["code"], -32602, "{reply}");

    client.send_line(r#"[{"jsonrpc":"2.0","id":1,"method":"daemon.status"}]"#);
    assert_eq!(client.read()["error"]["code"], -32600);

    // Still usable after all of that.
    client.result("daemon.status", json!({}));
}

#[test]
fn oversized_line_is_rejected_without_killing_the_connection() {
    let mut env = TestEnv::new();
    let pid = env.start_daemon();
    let mut client = env.client();
    // 11 MiB on one line: over the 10 MiB limit.
    let mut line = Vec::with_capacity(11 * 1024 * 1024 + 1);
    line.extend_from_slice(br#"{"jsonrpc":"2.0","id":1,"method":"daemon.status","params":{"pad":""#);
    line.resize(11 * 1024 * 1024, b'x');
    line.extend_from_slice(b"\"}}\n");
    client.send_bytes(&line);
    let reply = client.read();
    assert_eq!(reply["error"]["code"], -32007, "{reply}");
    assert_eq!(reply["error"]["data"]["kind"], "oversized_request");
    client.result("daemon.status", json!({}));

    let rss_kib = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:").map(|v| v.trim().trim_end_matches(" kB").parse::<u64>().unwrap()))
        .unwrap();
    assert!(rss_kib < 200 * 1024, "peak RSS {rss_kib} KiB: the line limit did not bound memory");
}

#[test]
fn subscription_delivers_workspace_and_shutdown_events() {
    let mut env = TestEnv::new();
    env.start_daemon();
    let mut subscriber = env.client();
    let sub = subscriber.result("events.subscribe", json!({}));
    assert!(sub.is_u64(), "subscription id: {sub}");

    env.init();
    let event = subscriber.next_event();
    assert_eq!(event["kind"], "workspace_opened", "{event}");
    assert_eq!(event["root"], env.work.canonicalize().unwrap().display().to_string());

    RawClient::connect(&env.socket).unwrap().result("daemon.shutdown", json!({}));
    let event = subscriber.next_event();
    assert_eq!(event["kind"], "daemon_shutting_down", "{event}");
    assert!(subscriber.read_wire().is_none(), "connection should close after shutdown");
}

#[test]
fn unsubscribe_stops_notifications() {
    let mut env = TestEnv::new();
    env.start_daemon();
    let mut client = env.client();
    // The reply to `events.subscribe` goes out before jsonrpsee registers the subscription for
    // unsubscription; an immediate unsubscribe must still find it. Repeat to give the race room.
    for round in 0..1000 {
        let sub = client.result("events.subscribe", json!({}));
        let stopped = client.result("events.unsubscribe", json!([sub]));
        assert_eq!(stopped, true, "round {round}: unsubscribe did not find subscription {sub}");
    }
    env.init();
    // The status reply must be the next message: no event was queued before it.
    let id = client.request("daemon.status", json!({}));
    let next = client.read();
    assert_eq!(next["id"], id, "unexpected message after unsubscribe: {next}");
}

fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:").map(|v| v.trim().trim_end_matches(" kB").parse::<u64>().unwrap()))
        .unwrap()
}

#[test]
fn a_half_closed_connection_still_gets_its_reply() {
    // What `socat` and `nc -N` do: write the request, shut down the write side, read.
    let mut env = TestEnv::new();
    env.start_daemon();
    for i in 0..200 {
        let mut stream = scafld_tests::connect_socket(&env.socket).unwrap();
        stream.set_read_timeout(Some(scafld_tests::DEADLINE)).unwrap();
        use std::io::{Read, Write};
        stream
            .write_all(format!("{{\"jsonrpc\":\"2.0\",\"id\":{i},\"method\":\"daemon.status\"}}\n").as_bytes())
            .unwrap();
        stream.shutdown(std::net::Shutdown::Write).unwrap();
        let mut reply = String::new();
        stream.read_to_string(&mut reply).unwrap();
        let reply: serde_json::Value =
            serde_json::from_str(reply.trim()).unwrap_or_else(|e| panic!("run {i}: {e}: {reply:?}"));
        assert_eq!(reply["id"], i, "{reply}");
        assert!(reply["result"]["pid"].is_number(), "{reply}");
    }
}

#[test]
fn an_object_id_is_an_invalid_request_that_gets_an_answer() {
    let mut env = TestEnv::new();
    env.start_daemon();
    let mut client = env.client();
    client.send_line(r#"{"jsonrpc":"2.0","id":{"a":1},"method":"daemon.status"}"#);
    let reply = client.read();
    assert_eq!(reply["error"]["code"], -32600, "{reply}");
    assert_eq!(reply["id"], json!(null));
    // A number no JSON parser here can hold is an id all the same, not a notification.
    client.send_line(r#"{"jsonrpc":"2.0","id":1e400}"#);
    let line = client.read_line();
    assert!(line.starts_with(r#"{"jsonrpc":"2.0","id":1e400,"error":{"code":-32600,"#), "{line}");
    // A real notification (no id) still gets nothing: the next reply is the next call's.
    client.send_line(r#"{"jsonrpc":"2.0","method":"daemon.status"}"#);
    client.result("daemon.status", json!({}));
}

/// Any number is an id (JSON-RPC 2.0), not only those jsonrpsee holds (`u64`): a negative,
/// fractional or huge one is answered, results and errors alike, with the id as it was
/// written, byte for byte; and a string id shaped like the token the daemon dispatches those
/// under (`rpc::ids`) is the client's own, never mixed up with one.
#[test]
fn any_number_is_an_id_and_comes_back_as_written() {
    let mut env = TestEnv::new();
    env.start_daemon();
    let mut client = env.client();
    let numbers = ["-1", "-0", "1.5", "2.0", "1E2", "18446744073709551616", "-9223372036854775809", "1e400"];
    for id in numbers {
        client.send_line(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"daemon.status"}}"#));
        let line = client.read_line();
        assert!(line.starts_with(&format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"#)), "{id}: {line}");
    }
    client.send_line(r#"{"jsonrpc":"2.0","id":-7,"method":"no.such_method"}"#);
    let line = client.read_line();
    assert!(line.starts_with(r#"{"jsonrpc":"2.0","id":-7,"error":{"code":-32601,"#), "{line}");
    client.send_line(r#"{"jsonrpc":"2.0","id":-8}"#);
    let line = client.read_line();
    assert!(line.starts_with(r#"{"jsonrpc":"2.0","id":-8,"error":{"code":-32600,"#), "{line}");
    // A subscription call's reply is written by jsonrpsee itself; its id comes back too.
    client.send_line(r#"{"jsonrpc":"2.0","id":-0.5,"method":"events.subscribe","params":{}}"#);
    let line = client.read_line();
    assert!(line.starts_with(r#"{"jsonrpc":"2.0","id":-0.5,"result":"#), "{line}");

    // On a fresh connection, pipelined: a negative id (swapped for the connection's first
    // token) and string ids spelt as its first tokens; each reply carries its own request's id.
    let mut client = env.client();
    let sent = [r#"-3"#, r#""scafld-transport-id:0""#, r#""scafld-transport-id:1""#, r#""scafld-transport-id:0x""#];
    for id in sent {
        client.send_line(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"daemon.status"}}"#));
    }
    let mut got: Vec<String> = (0..sent.len())
        .map(|_| {
            let line = client.read_line();
            let id = line.strip_prefix(r#"{"jsonrpc":"2.0","id":"#).and_then(|rest| rest.split_once(r#","result":"#));
            id.unwrap_or_else(|| panic!("{line}")).0.to_string()
        })
        .collect();
    got.sort();
    let mut sent = sent.map(str::to_string).to_vec();
    sent.sort();
    assert_eq!(got, sent);

    // What a stopping daemon refuses unstarted is answered with the id as written too.
    client.result("daemon.shutdown", json!({}));
    let deadline = std::time::Instant::now() + scafld_tests::DEADLINE;
    loop {
        client.send_line(r#"{"jsonrpc":"2.0","id":-2,"method":"daemon.status"}"#);
        let line = client.read_line();
        assert!(line.starts_with(r#"{"jsonrpc":"2.0","id":-2,"#), "{line}");
        if line.contains("shutting_down") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never refused while stopping: {line}");
    }
}

#[test]
fn a_client_that_never_reads_cannot_exhaust_the_daemon() {
    use std::io::Write;
    let mut env = TestEnv::new();
    let pid = env.start_daemon();
    // Pipeline up to 40 MiB of requests without reading one reply. The daemon stops reading
    // this connection once its replies back up: the writes then stay blocked however long
    // the daemon is given (here: while it serves another client a hundred times).
    let mut hog = scafld_tests::connect_socket(&env.socket).unwrap();
    hog.set_nonblocking(true).unwrap();
    let mut other = env.client();
    let line = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"workspace.list\",\"params\":{}}\n";
    let (mut sent, mut blocked) = (0usize, 0);
    while sent < 40 * 1024 * 1024 && blocked < 100 {
        match hog.write(line) {
            Ok(n) => {
                sent += n;
                blocked = 0;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                blocked += 1;
                other.result("daemon.status", json!({}));
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(sent < 8 * 1024 * 1024, "the daemon took {sent} bytes of requests whose replies nobody reads");
    let peak = peak_rss_kib(pid);
    assert!(peak < 300 * 1024, "peak RSS {peak} KiB with a client that never reads");
    hog.shutdown(std::net::Shutdown::Both).unwrap();
    other.result("daemon.status", json!({}));
}

#[test]
fn unfinished_lines_share_a_budget_and_the_daemon_keeps_serving() {
    use std::io::{BufRead, Write};
    let mut env = TestEnv::new();
    let pid = env.start_daemon();
    // 40 connections each send 9 MiB of a line that does not end: 360 MiB against the
    // 64 MiB budget. Writes may fail once the daemon has closed a connection.
    let chunk = vec![b'x'; 9 * 1024 * 1024];
    let holders: Vec<std::os::unix::net::UnixStream> = (0..40)
        .map(|_| {
            let mut stream = scafld_tests::connect_socket(&env.socket).unwrap();
            stream.set_read_timeout(Some(scafld_tests::DEADLINE)).unwrap();
            let _ = stream.write_all(br#"{"jsonrpc":"2.0","id":1,"method":"daemon.status","params":{"pad":""#);
            let _ = stream.write_all(&chunk);
            stream
        })
        .collect();
    env.client().result("daemon.status", json!({}));
    let peak = peak_rss_kib(pid);
    // Every holder now ends its line with end of stream: one answer each, either "busy" (held
    // to the budget, closed) or a parse error for the unterminated JSON.
    let mut kinds = std::collections::BTreeMap::<String, usize>::new();
    for holder in holders {
        let _ = holder.shutdown(std::net::Shutdown::Write);
        let mut reply = String::new();
        let _ = std::io::BufReader::new(&holder).read_line(&mut reply);
        let reply: serde_json::Value = serde_json::from_str(&reply).unwrap_or(json!({}));
        *kinds.entry(reply["error"]["data"]["kind"].as_str().unwrap_or("none").to_string()).or_default() += 1;
    }
    assert!(kinds.get("busy").is_some_and(|n| *n >= 20), "{kinds:?}");
    assert!(peak < 300 * 1024, "peak RSS {peak} KiB holding unfinished lines ({kinds:?})");
    env.client().result("daemon.status", json!({}));
}

#[test]
fn idle_connections_are_closed_but_subscribers_stay() {
    let mut env = TestEnv::new();
    env.start_daemon_with(&[("SCAFLD_IDLE_CONNECTION_SECONDS", "1")]);
    let mut subscriber = env.client();
    subscriber.result("events.subscribe", json!({}));
    let mut idle = env.client();
    let mut called = env.client();
    called.result("daemon.status", json!({}));
    // The idle ones are closed (also one whose call has finished): they read end of stream
    // well before the test's deadline.
    assert!(idle.read_wire().is_none());
    assert!(called.read_wire().is_none());
    // The subscriber, just as quiet, still receives events.
    scafld_tests::git(&env.work, &["init", "-q"]);
    env.init();
    let event = subscriber.next_event();
    assert_eq!(event["kind"], "workspace_opened", "{event}");
}

#[test]
fn a_full_daemon_closes_its_longest_idle_connection_to_serve_a_new_one() {
    let mut env = TestEnv::new();
    env.start_daemon_with(&[("SCAFLD_MAX_CONNECTIONS", "20")]);
    let mut subscriber = env.client();
    subscriber.result("events.subscribe", json!({}));
    let mut hogs: Vec<RawClient> = (0..40).map(|_| env.client()).collect();
    // Every new client is served: each takes the place of the longest idle connection.
    for i in 0..5 {
        let reply = env.client().call("daemon.status", json!({}));
        assert!(reply.get("result").is_some(), "client {i}: {reply}");
    }
    // The first hogs were closed to make room; a subscriber is never idle and stays.
    assert!(hogs[0].read_wire().is_none());
    scafld_tests::git(&env.work, &["init", "-q"]);
    env.init();
    assert_eq!(subscriber.next_event()["kind"], "workspace_opened");
}

/// Every method `protocol/` declares (`method!(Marker = "name", ...)`) and the event
/// subscription pair.
fn declared_methods() -> Vec<String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../protocol/src/methods");
    let mut source = String::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        source.push_str(&std::fs::read_to_string(entry.unwrap().path()).unwrap());
    }
    let mut names: Vec<String> = source
        .split("method!(")
        .skip(1)
        .filter_map(|block| {
            // After the doc comments: `Marker = "name", Params => Result`.
            let declared = &block[block.find("= \"")? + 3..];
            Some(declared.split('"').next()?.to_string())
        })
        .collect();
    names.extend(["events.subscribe".to_string(), "events.unsubscribe".to_string()]);
    names
}

#[test]
fn every_method_the_protocol_declares_is_registered() {
    let mut env = TestEnv::new();
    env.start_daemon();
    let names = declared_methods();
    assert!(names.len() > 40, "{names:?}");
    let mut client = env.client();
    for name in &names {
        // An unknown parameter: every method refuses it (-32602) before doing anything, so
        // probing has no effect; an unregistered one answers -32601.
        let reply = client.call(name, json!({"probe_only": true}));
        assert_ne!(reply["error"]["code"], -32601, "`{name}` is declared in protocol/ but not registered: {reply}");
    }
    client.result("daemon.status", json!({}));
}

/// One request line of `method` with `params`.
fn request(id: &str, method: &str, params: serde_json::Value) -> String {
    format!("{}\n", json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
}

/// A request whose error reply (an unknown method's, which names it) is about `2 * len` bytes.
fn request_with_big_reply(id: &str, len: usize) -> String {
    format!("{}\n", json!({"jsonrpc": "2.0", "id": id, "method": "x".repeat(len)}))
}

/// The first `wanted` bytes waiting to be read on `stream`, looked at without taking them
/// (waited for, up to [`scafld_tests::DEADLINE`]).
fn peek(stream: &std::os::unix::net::UnixStream, wanted: usize) -> String {
    use nix::sys::socket::{MsgFlags, recv};
    use std::os::fd::AsRawFd;
    let mut bytes = vec![0u8; wanted];
    let mut seen = 0;
    scafld_tests::wait_until("the first bytes of a reply", || {
        seen = recv(stream.as_raw_fd(), &mut bytes, MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT).unwrap_or(0);
        seen == wanted
    });
    String::from_utf8_lossy(&bytes[..seen]).into_owned()
}

/// An approval and, behind it on the same connection, a call whose reply (1 MiB) is far more
/// than the socket holds, never read. The approval must finish (and let the task's lock go)
/// while the daemon cannot write that reply: a daemon that waited on the write would hold the
/// approval back, and `build` behind it. What is bounded by the machine's speed is only the
/// approval's own work (a git snapshot of some hundreds of files) and the big reply's, which
/// must come first: the reply read first (peeked, never taken) is checked to be the big one,
/// so the test never passes by the approval having finished before there was anything to
/// block on. The approval is waited for over one connection of our own, not a command started
/// every few milliseconds, which on a loaded machine took the CPU the approval needed.
#[test]
fn a_client_that_stops_reading_holds_back_no_call_already_running() {
    use std::io::Write;
    let mut env = TestEnv::new();
    env.start_daemon();
    scafld_tests::git(&env.work, &["init", "-q"]);
    env.init();
    let root = env.work.display().to_string();
    std::fs::write(env.work.join(".scafld/specs/drafts/held.md"), scafld_tests::bench::build_spec("held", 1)).unwrap();
    // Enough files that approval's git snapshot outlasts the big reply's making (two to three
    // times over beside six CPU hogs on two cores; the check below says so if it did not).
    for n in 0..600 {
        std::fs::write(env.work.join(format!("f{n}.txt")), n.to_string()).unwrap();
    }
    // The approval takes the task's lock; the reply behind it is never read.
    let mut hog = scafld_tests::connect_socket(&env.socket).unwrap();
    let approve = request("approve", "task.approve", json!({"root": root, "task_id": "held", "reason": "r"}));
    hog.write_all(format!("{approve}{}", request_with_big_reply("big", 512 << 10)).as_bytes()).unwrap();
    let first = peek(&hog, 32);
    assert!(first.contains(r#""id":"big""#), "the approval was answered before the big reply: {first}");
    // The approval still finishes (and lets the lock go) while its connection's peer reads nothing.
    let mut client = env.client();
    let params = json!({"root": root, "task_id": "held"});
    scafld_tests::wait_until("the approval held back by its unread connection", || {
        client.result("task.status", params.clone())["status"] == "approved"
    });
    env.scafld(&["build", "held"]).assert_code(0);
    drop(hog);
}

#[test]
fn a_reply_being_written_when_the_daemon_stops_arrives_whole_with_the_shutdown_event() {
    use std::io::{BufRead, Read, Write};
    let mut env = TestEnv::new();
    env.start_daemon();
    let mut reader = scafld_tests::connect_socket(&env.socket).unwrap();
    reader.set_read_timeout(Some(std::time::Duration::from_secs(20))).unwrap();
    reader.write_all(request("sub", "events.subscribe", json!([])).as_bytes()).unwrap();
    let mut subscribed = String::new();
    std::io::BufReader::new(&reader).read_line(&mut subscribed).unwrap();
    let pipelined =
        format!("{}{}", request_with_big_reply("big", 4 << 20), request("status", "daemon.status", json!({})));
    reader.write_all(pipelined.as_bytes()).unwrap();
    // The big reply has begun to arrive when the daemon is told to stop.
    let mut got = vec![0u8; 64 * 1024];
    let n = reader.read(&mut got).unwrap();
    got.truncate(n);
    env.client().result("daemon.shutdown", json!({}));
    // Read at an unhurried pace (a pause per chunk, so the reply is still being written when
    // the daemon stops; nothing is waited for by it) until the daemon closes the connection.
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        std::thread::sleep(std::time::Duration::from_millis(1));
        match reader.read(&mut chunk).unwrap() {
            0 => break,
            n => got.extend_from_slice(&chunk[..n]),
        }
    }
    let text = String::from_utf8(got).unwrap();
    assert!(text.ends_with('\n'), "the stream ends mid-line after {} bytes", text.len());
    let ids: Vec<serde_json::Value> =
        text.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["id"].clone()).collect();
    assert!(ids.contains(&json!("big")) && ids.contains(&json!("status")), "{ids:?}");
    assert!(text.contains("daemon_shutting_down"), "the subscriber never got the shutdown event");
}

#[test]
fn calls_pipelined_with_sizeable_replies_before_any_is_read_all_get_them() {
    use std::io::{BufRead, Write};
    let mut env = TestEnv::new();
    env.start_daemon();
    let stream = scafld_tests::connect_socket(&env.socket).unwrap();
    stream.set_write_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    stream.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    // Forty requests of 32 KiB with 64 KiB replies: more than the socket buffers hold.
    let requests: String = (0..40).map(|i| request_with_big_reply(&i.to_string(), 32 * 1024)).collect();
    (&stream).write_all(requests.as_bytes()).expect("the daemon stopped reading the pipelined requests");
    let mut replies = std::io::BufReader::new(&stream);
    for _ in 0..40 {
        let mut reply = String::new();
        assert!(replies.read_line(&mut reply).unwrap() > 0);
    }
}

#[test]
fn a_connection_whose_replies_go_unread_is_idle_and_makes_room() {
    use std::io::{Read, Write};
    let mut env = TestEnv::new();
    env.start_daemon_with(&[("SCAFLD_MAX_CONNECTIONS", "2")]);
    // Two clients ask for 8 MiB replies and read a byte of each: their calls are done, nothing
    // is in flight and they hold no subscription, but most of each reply waits unread.
    let _hogs: Vec<std::os::unix::net::UnixStream> = (0..2)
        .map(|i| {
            let mut hog = scafld_tests::connect_socket(&env.socket).unwrap();
            hog.set_read_timeout(Some(scafld_tests::DEADLINE)).unwrap();
            hog.write_all(request_with_big_reply(&i.to_string(), 4 << 20).as_bytes()).unwrap();
            hog.read_exact(&mut [0u8; 1]).unwrap();
            hog
        })
        .collect();
    // The daemon is full; the one idle longest makes room for a new client.
    let reply = env.client().call("daemon.status", json!({}));
    assert!(reply.get("result").is_some(), "a new client is refused: {reply}");
}

#[test]
fn a_subscriber_that_stops_reading_is_told_what_it_missed_and_events_go_on() {
    let mut env = TestEnv::new();
    env.start_daemon();
    scafld_tests::git(&env.work, &["init", "-q"]);
    env.init();
    env.scafld(&["plan", "base", "--title", "Base"]).assert_code(0);
    let drafts = env.work.join(".scafld/specs/drafts");
    let base = std::fs::read_to_string(drafts.join("base.md")).unwrap();
    let draft = |id: &str| {
        std::fs::write(drafts.join(format!("{id}.md")), base.replace("task_id: base", &format!("task_id: {id}")))
            .unwrap()
    };
    let mut subscriber = env.client();
    subscriber.result("events.subscribe", json!({}));
    let mut watcher = env.client();
    watcher.result("events.subscribe", json!({}));
    // The subscriber reads nothing while thousands of drafts appear (more events than the
    // daemon buffers), and for 6 s after another subscriber saw them all published: longer
    // than the 5 s after which the daemon used to end such a subscription without a word.
    let started = std::time::Instant::now();
    for k in 0..5000 {
        draft(&format!("e{k}"));
    }
    draft("marker");
    while !(watcher.next_event()["task_id"] == "marker") {
        assert!(started.elapsed() < std::time::Duration::from_secs(240), "the drafts were never published");
    }
    drop(watcher);
    // The stall itself, not a wait for anything: only its length can outlast the old 5 s.
    std::thread::sleep(std::time::Duration::from_secs(6));
    // Once it reads again it is told it missed some, and is sent what happens next.
    let mut kinds = std::collections::BTreeMap::<String, usize>::new();
    loop {
        let event = subscriber.next_event();
        let kind = event["kind"].as_str().unwrap_or_default().to_string();
        *kinds.entry(kind.clone()).or_default() += 1;
        if kind == "events_lagged" {
            assert!(event["missed"].as_u64().is_some_and(|n| n > 0), "{event}");
            break;
        }
    }
    draft("late");
    loop {
        let event = subscriber.next_event();
        if event["kind"] == "task_changed" && event["task_id"] == "late" {
            break;
        }
    }
}

#[test]
fn idle_subscriptions_cannot_take_every_connection() {
    let mut env = TestEnv::new();
    env.start_daemon_with(&[("SCAFLD_MAX_CONNECTIONS", "20")]);
    // One client fills every connection slot with a subscription it never reads.
    let mut refused = 0;
    let mut subscribers: Vec<RawClient> = Vec::new();
    for _ in 0..20 {
        let mut subscriber = env.client();
        let reply = subscriber.call("events.subscribe", json!({}));
        if reply["error"]["data"]["kind"] == "busy" {
            refused += 1;
        }
        subscribers.push(subscriber);
    }
    // Half the slots at most hold a subscription; the rest stay for calls.
    assert_eq!(refused, 10, "subscriptions refused");
    for i in 0..5 {
        let reply = env.client().call("daemon.status", json!({}));
        assert!(reply.get("result").is_some(), "client {i}: {reply}");
    }
    // A subscription still held delivers.
    scafld_tests::git(&env.work, &["init", "-q"]);
    env.init();
    assert_eq!(subscribers[0].next_event()["kind"], "workspace_opened");
}

#[test]
fn unsubscribe_refuses_params_it_cannot_read() {
    let mut env = TestEnv::new();
    env.start_daemon();
    let mut client = env.client();
    let sub = client.result("events.subscribe", json!({}));
    for params in [json!("x"), json!({"bogus": 1}), json!({"subscription": sub}), json!([]), json!([sub, 1])] {
        let reply = client.call("events.unsubscribe", params.clone());
        assert_eq!(reply["error"]["data"]["kind"], "invalid_params", "{params}: {reply}");
    }
    // The subscription is still there, and the right form ends it.
    assert_eq!(client.result("events.unsubscribe", json!([sub])), true);
    assert_eq!(client.result("events.unsubscribe", json!([sub])), false);
}

#[test]
fn lines_left_unfinished_lose_the_budget_to_a_fresh_request() {
    use std::io::Write;
    let mut env = TestEnv::new();
    env.start_daemon();
    scafld_tests::git(&env.work, &["init", "-q"]);
    env.init();
    env.scafld(&["plan", "t1", "--title", "T"]).assert_code(0);
    // Seven connections stall 9 MiB into a line each: 63 MiB of the 64 MiB budget.
    let chunk = vec![b'b'; 9 << 20];
    let _holders: Vec<std::os::unix::net::UnixStream> = (0..7)
        .map(|_| {
            let mut stream = scafld_tests::connect_socket(&env.socket).unwrap();
            stream.write_all(br#"{"jsonrpc":"2.0","id":1,"method":"daemon.status","params":{"x":""#).unwrap();
            stream.write_all(&chunk).unwrap();
            stream
        })
        .collect();
    // Another client's legitimate 4 MB request is served; a stalled line makes room for it.
    let text = std::fs::read_to_string(env.work.join(".scafld/specs/drafts/t1.md")).unwrap();
    let text = format!("{text}\n{}", format!("{}\n", "z".repeat(100)).repeat(40_000));
    let root = env.work.display().to_string();
    let reply = env.client().call("task.check", json!({"root": root, "task_id": "t1", "text": text}));
    assert!(reply.get("result").is_some(), "{}", &reply.to_string()[..reply.to_string().len().min(400)]);
}
