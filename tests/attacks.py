#!/usr/bin/env python3
"""Replay the hardening attacks (issue 14) against a real scafldd and print, per attack, the
inputs tried, crashes, lost replies or events, and the daemon's peak RSS.

Bounded and loopback only: each attack runs against a fresh daemon in a temp directory, under
an address-space limit (--memory-mib, default 4096), and ends with a liveness check.

Usage: tests/attacks.py [--bin target/release] [--quick] [--memory-mib N]
Build first: cargo build --release (or pass --bin target/debug).
"""

import argparse
import json
import os
import random
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEADLINE = 20.0


class Daemon:
    """A scafldd in its own temp directory, started under an address-space limit."""

    def __init__(self, bin_dir, memory_mib, extra_env=None):
        self.bin_dir = bin_dir
        self.dir = tempfile.mkdtemp(prefix="scafld-attack-")
        self.work = os.path.join(self.dir, "work")
        os.makedirs(self.work)
        os.makedirs(os.path.join(self.dir, "run"), mode=0o700)
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": self.dir,
            "SCAFLD_SOCKET": os.path.join(self.dir, "run", "scafldd.sock"),
            "SCAFLD_STATE_DIR": os.path.join(self.dir, "state"),
            "NO_COLOR": "1",
        }
        self.env.update(extra_env or {})
        self.memory = memory_mib << 20
        self.proc = None

    @property
    def socket(self):
        return self.env["SCAFLD_SOCKET"]

    def start(self):
        limit = self.memory

        def limited():
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

        self.proc = subprocess.Popen([os.path.join(self.bin_dir, "scafldd")], env=self.env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=limited)
        end = time.time() + DEADLINE
        while time.time() < end:
            if self.proc.poll() is not None:
                raise RuntimeError("scafldd exited at start: " + self.proc.stderr.read().decode(errors="replace"))
            try:
                if self.call("daemon.status") is not None:
                    return self
            except OSError:
                time.sleep(0.02)
        raise RuntimeError("scafldd did not answer")

    def connect(self, timeout=DEADLINE):
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(timeout)
        s.connect(self.socket)
        return s

    def call(self, method, params=None, timeout=DEADLINE):
        with self.connect(timeout) as s:
            s.sendall(json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}).encode() + b"\n")
            line = s.makefile("rb").readline()
            return json.loads(line) if line else None

    def alive(self):
        try:
            reply = self.call("daemon.status", timeout=10)
            return self.proc.poll() is None and reply is not None and "result" in reply
        except (OSError, ValueError):
            return False

    def peak_rss_mib(self):
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) / 1024
        except OSError:
            pass
        return float("nan")

    def scafld(self, *args, check=True):
        run = subprocess.run([os.path.join(self.bin_dir, "scafld"), *args], cwd=self.work, env=self.env,
                             capture_output=True, text=True, timeout=120)
        if check and run.returncode != 0:
            raise RuntimeError(f"scafld {' '.join(args)}: {run.stdout}{run.stderr}")
        return run

    def workspace(self, spec_count=1, command="true"):
        subprocess.run(["git", "init", "-q"], cwd=self.work, check=True)
        self.scafld("init")
        for i in range(spec_count):
            spec = (f"---\nspec_version: '2.0'\ntask_id: t{i}\nstatus: draft\n---\n\n# T\n\n## Phase 1: A\n\n"
                    f"Acceptance:\n- [ ] `a` test - ok\n  - Command: `{command}`\n")
            with open(os.path.join(self.work, f".scafld/specs/drafts/t{i}.md"), "w") as f:
                f.write(spec)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        crashed = self.proc is not None and self.proc.returncode not in (0, -signal.SIGTERM, None)
        shutil.rmtree(self.dir, ignore_errors=True)
        return crashed


def malformed_rpc(d, n):
    rng = random.Random(7)
    corpus = [b"", b"{", b"[]", b"[1,2]", b"null", b'{"jsonrpc":"2.0","id":{"a":1},"method":"daemon.status"}',
              b'{"jsonrpc":"1.0","id":1,"method":"daemon.status"}', b'{"id":1,"method":"no.such"}',
              b'{"jsonrpc":"2.0","id":1,"method":"workspace.open","params":{"root":42}}', b"\xff\xfe\xfd",
              b'{"jsonrpc":"2.0","id":1,"method":"task.status","params":{"root":"/","task_id":"../../etc"}}']
    unanswered = 0
    with d.connect() as s:
        reader = s.makefile("rb")
        for i in range(n):
            line = rng.choice(corpus) if i % 2 else bytes(rng.randrange(1, 256) for _ in range(rng.randrange(1, 200)))
            line = line.replace(b"\n", b" ")
            s.sendall(line + b"\n")
            s.sendall(json.dumps({"jsonrpc": "2.0", "id": "probe", "method": "daemon.status"}).encode() + b"\n")
            # Every probe must be answered; garbage may or may not be (notifications are not).
            while True:
                reply = reader.readline()
                if not reply:
                    unanswered += 1
                    return n, unanswered
                if json.loads(reply).get("id") == "probe":
                    break
    return n, unanswered


def pipelining(d, megabytes):
    s = d.connect()
    s.setblocking(False)
    line = b'{"jsonrpc":"2.0","id":1,"method":"workspace.list","params":{}}\n'
    sent, blocked = 0, 0
    while sent < megabytes << 20 and blocked < 200:
        try:
            sent += s.send(line)
            blocked = 0
        except BlockingIOError:
            blocked += 1
            d.call("daemon.status")
    s.close()
    return sent // len(line), 0


def partial_lines(d, count, mib):
    chunk = b"x" * (mib << 20)
    conns, busy = [], 0
    for _ in range(count):
        s = d.connect()
        try:
            s.sendall(b'{"jsonrpc":"2.0","id":1,"method":"daemon.status","params":{"pad":"')
            s.sendall(chunk)
        except OSError:
            pass
        conns.append(s)
    for s in conns:
        try:
            s.shutdown(socket.SHUT_WR)
            reply = s.makefile("rb").readline()
            if reply and json.loads(reply).get("error", {}).get("data", {}).get("kind") == "busy":
                busy += 1
        except (OSError, ValueError):
            pass
        s.close()
    return count, 0


def idle_connections(d, count):
    conns = []
    for _ in range(count):
        try:
            conns.append(d.connect())
        except OSError:
            break
    lost = 0 if d.alive() else 1
    for s in conns:
        s.close()
    return len(conns), lost


def half_close(d, runs):
    lost = 0
    for i in range(runs):
        with d.connect() as s:
            s.sendall(json.dumps({"jsonrpc": "2.0", "id": i, "method": "daemon.status"}).encode() + b"\n")
            s.shutdown(socket.SHUT_WR)
            if not s.makefile("rb").readline():
                lost += 1
    return runs, lost


def huge_files(d):
    d.workspace()
    with open(os.path.join(d.work, "big.bin"), "wb") as f:
        f.truncate(3 << 30)  # sparse 3 GiB untracked file
    os.symlink("/dev/zero", os.path.join(d.work, "zero"))
    with open(os.path.join(d.work, ".scafld/specs/drafts/huge.md"), "wb") as f:
        f.truncate(3 << 30)
    d.scafld("list", check=False)
    d.scafld("approve", "t0", "--reason", "attack", check=False)
    d.scafld("build", "t0", check=False)
    d.scafld("build", "t0", check=False)
    return 4, 0


def lifecycle_races(d, parallel):
    d.workspace()
    threads = [threading.Thread(target=d.scafld, args=("approve", "t0", "--reason", "race"), kwargs={"check": False})
               for _ in range(parallel)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    entries = json.loads(d.scafld("session", "t0", "--json").stdout)["result"]["entries"]
    approvals = sum(1 for e in entries if e.get("type") == "approval")
    return parallel, abs(approvals - 1)


def kill_during_runs(bin_dir, memory, rounds):
    d = Daemon(bin_dir, memory).start()
    d.workspace(command="sleep 30 & sleep 30")
    d.scafld("approve", "t0", "--reason", "kill")
    d.scafld("build", "t0")
    orphans = 0
    for _ in range(rounds):
        subprocess.Popen([os.path.join(bin_dir, "scafld"), "build", "t0"], cwd=d.work, env=d.env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        end = time.time() + DEADLINE
        while time.time() < end and not sleepers(d.work):
            time.sleep(0.02)
        d.proc.kill()
        d.proc.wait()
        d.start()  # recovery reaps the recorded groups
        end = time.time() + DEADLINE
        while time.time() < end and sleepers(d.work):
            time.sleep(0.05)
        orphans += len(sleepers(d.work))
    crashed = d.stop()
    return rounds, orphans, crashed


def sleepers(cwd):
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{pid}/cwd") == cwd and open(f"/proc/{pid}/comm").read().strip() == "sleep":
                found.append(pid)
        except OSError:
            pass
    return found


def corrupted_database(bin_dir, memory):
    tried, crashes = 0, 0
    for damage in ("truncate-50", "truncate-10", "truncate-90", "bitflip", "delete"):
        d = Daemon(bin_dir, memory).start()
        d.workspace()
        d.scafld("approve", "t0", "--reason", "db")
        d.stop_keep = True
        d.proc.send_signal(signal.SIGTERM)
        d.proc.wait(30)
        db = os.path.join(d.env["SCAFLD_STATE_DIR"], "db", "db")
        data = open(db, "rb").read()
        if damage == "delete":
            shutil.rmtree(os.path.dirname(db))
        elif damage == "bitflip":
            flipped = bytearray(data)
            for i in range(len(flipped) // 4, len(flipped), 97):
                flipped[i] ^= 0x5A
            open(db, "wb").write(bytes(flipped))
        else:
            open(db, "wb").write(data[: len(data) * int(damage.split("-")[1]) // 100])
        run = subprocess.run([os.path.join(bin_dir, "scafldd")], env=d.env, capture_output=True, text=True, timeout=60)
        tried += 1
        # A refusal is exit 1 with the recovery command; a panic (101) or serving is a failure.
        if run.returncode != 1 or "scafldd --recover" not in run.stderr:
            crashes += 1
        shutil.rmtree(d.dir, ignore_errors=True)
    return tried, crashes


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", default=os.path.join(ROOT, "target", "release"))
    parser.add_argument("--quick", action="store_true", help="smaller inputs")
    parser.add_argument("--memory-mib", type=int, default=4096)
    args = parser.parse_args()
    q = args.quick
    args.bin = os.path.abspath(args.bin)
    fresh = [
        ("malformed RPC lines", lambda d: malformed_rpc(d, 200 if q else 2000)),
        ("requests taken from a client never reading", lambda d: pipelining(d, 8 if q else 40)),
        ("partial 9 MiB lines", lambda d: partial_lines(d, 20 if q else 100, 9)),
        ("idle connections", lambda d: idle_connections(d, 200 if q else 2000)),
        ("half-closed requests", lambda d: half_close(d, 100 if q else 900)),
        ("3 GiB file, /dev/zero link, 3 GiB spec", huge_files),
        ("parallel approvals", lambda d: lifecycle_races(d, 8 if q else 32)),
    ]
    print(f"{'attack':42} {'inputs':>8} {'crashes':>8} {'lost':>6} {'peak RSS MiB':>13}")
    failed = False
    for name, attack in fresh:
        d = Daemon(args.bin, args.memory_mib).start()
        try:
            inputs, lost = attack(d)
        except Exception as e:  # noqa: BLE001 - report and go on
            inputs, lost = 0, 1
            print(f"  {name}: {e}", file=sys.stderr)
        alive = d.alive()
        rss = d.peak_rss_mib()
        crashed = d.stop() or not alive
        failed |= crashed or lost > 0
        print(f"{name:42} {inputs:>8} {int(crashed):>8} {lost:>6} {rss:>13.1f}")
    rounds, orphans, crashed = kill_during_runs(args.bin, args.memory_mib, 3 if q else 20)
    failed |= crashed or orphans > 0
    print(f"{'kill -9 during a build (orphans as lost)':42} {rounds:>8} {int(crashed):>8} {orphans:>6} {'-':>13}")
    tried, bad = corrupted_database(args.bin, args.memory_mib)
    failed |= bad > 0
    print(f"{'damaged databases (served or panicked)':42} {tried:>8} {bad:>8} {0:>6} {'-':>13}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
