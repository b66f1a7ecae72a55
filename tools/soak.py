#!/usr/bin/env python3
"""Soak test of `sluice serve` (issue 14 §3; a program, not a test: its figures go to docs/RELIABILITY.md).

Starts `sluice serve` on a model (default the demo) and runs N concurrent clients for D seconds. Each
request is, by a seeded draw: malformed (10%: broken JSON, wrong types, unknown fields' values, an
unknown path, a wrong method, a body over the server's limit, invalid UTF-8, garbage instead of HTTP),
abandoned (10%: a streamed request whose client closes the connection after the first event), or an
ordinary one (chat, completion or Anthropic messages; streamed or not; 4-48 tokens). Every 10 s the
server's RSS and open file descriptors are sampled (/proc/PID). At the end: requests by kind and HTTP
status, tokens served, the samples, and whether RSS and fds are flat after warm-up; the server must still
answer and must exit cleanly on SIGINT.

Usage: build/venv/bin/python tools/soak.py [--sluice build/sluice] [--model M] [--duration 600]
       [--clients 32] [--seed 1] [--json build/soak.json]
"""
import argparse
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPTS = ["And it came to pass", "In the beginning", "The LORD said unto Moses", "Blessed are they",
           "Now these are the generations", "Hear, O Israel", "And the king said", "Who is like unto thee"]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.by = {}  # (kind, status) -> count
        self.tokens = 0
        self.errors = []  # unexpected outcomes (a valid request refused, a hung answer, ...)

    def add(self, kind, status, tokens=0, unexpected=None):
        with self.lock:
            self.by[(kind, status)] = self.by.get((kind, status), 0) + 1
            self.tokens += tokens
            if unexpected and len(self.errors) < 50:
                self.errors.append(f"{kind}: {unexpected}")


def malformed(rng, port):
    """One malformed request; returns (status, note). Status 0: the connection was closed."""
    k = rng.randrange(8)
    if k == 7:  # garbage instead of HTTP
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        s.sendall(bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 600))) + b"\r\n\r\n")
        try:
            data = s.recv(4096)
        except OSError:
            data = b""
        s.close()
        return (int(data[9:12]) if data.startswith(b"HTTP/1.") else 0), "garbage"
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    path, method, body = "/v1/chat/completions", "POST", None
    if k == 0:
        body = b'{"messages": [{"role": "user", "content": "Hi"'  # cut JSON
    elif k == 1:
        body = json.dumps({"messages": "not a list", "max_tokens": "many"}).encode()
    elif k == 2:
        body = json.dumps({"messages": [{"role": "wizard", "content": 3}], "temperature": -5}).encode()
    elif k == 3:
        path, body = "/v1/nothing/here", b"{}"
    elif k == 4:
        method, body = "DELETE", b""
    elif k == 5:
        body = b'{"prompt": "' + b"x" * (2 << 20) + b'"}'  # over the 1 MiB limit
        path = "/v1/completions"
    else:
        body = b'{"prompt": "\xff\xfe\xc3", "max_tokens": 4}'
        path = "/v1/completions"
    try:
        c.request(method, path, body=body, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        return r.status, path
    except (OSError, http.client.HTTPException):
        return 0, "closed"  # a server may close on an oversized body
    finally:
        c.close()


def ordinary(rng, port, stream, abandon=False):
    """One valid request; returns (status, tokens)."""
    api = rng.choice(["chat", "completion", "messages"])
    n = rng.randint(4, 48)
    p = rng.choice(PROMPTS)
    if api == "chat":
        path, body = "/v1/chat/completions", {"messages": [{"role": "user", "content": p}], "max_tokens": n}
    elif api == "completion":
        path, body = "/v1/completions", {"prompt": p, "max_tokens": n}
    else:
        path, body = "/v1/messages", {"messages": [{"role": "user", "content": p}], "max_tokens": n}
    body["temperature"] = rng.choice([0, 0.7])
    body["stream"] = stream
    if stream and api == "chat":
        body["stream_options"] = {"include_usage": True}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json",
                                                               "anthropic-version": "2023-06-01"})
        r = c.getresponse()
        if abandon:
            r.read1(64) if hasattr(r, "read1") else r.read(64)
            c.sock.shutdown(socket.SHUT_RDWR)
            return r.status, 0
        data = r.read()
        if r.status != 200:
            return r.status, 0
        if not stream:
            j = json.loads(data)
            u = j.get("usage", {})
            return 200, u.get("completion_tokens", u.get("output_tokens", 0))
        text = data.decode(errors="replace")
        if "[DONE]" not in text and "message_stop" not in text:
            return -1, 0  # a stream that did not end properly
        return 200, text.count("\ndata: ") + text.startswith("data: ")
    except (OSError, http.client.HTTPException, ValueError) as e:
        return -2, str(e)[:80]
    finally:
        c.close()


def client(i, args, port, deadline, st):
    rng = random.Random(args.seed * 1000 + i)
    while time.monotonic() < deadline:
        x = rng.random()
        if x < 0.10:
            status, note = malformed(rng, port)
            st.add("malformed", status, unexpected=None if status in (0, 400, 404, 405, 413) else f"{status} {note}")
        elif x < 0.20:
            status, _ = ordinary(rng, port, True, abandon=True)
            st.add("abandoned", status, unexpected=None if status in (200, -2) else f"status {status}")
        else:
            stream = rng.random() < 0.5
            status, tok = ordinary(rng, port, stream)
            kind = "stream" if stream else "whole"
            ok = status == 200 or status == 503  # 503: the queue was full (max_queue), a valid answer
            st.add(kind, status, tok if isinstance(tok, int) else 0, None if ok else f"status {status} {tok}")


def sample(pid):
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))
    return rss * 1024, len(os.listdir(f"/proc/{pid}/fd"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sluice", default=os.path.join(ROOT, "build/sluice"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models/demo.sluice"))
    ap.add_argument("--duration", type=float, default=600)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--interval", type=float, default=10)
    ap.add_argument("--json", default=os.path.join(ROOT, "build/soak.json"))
    ap.add_argument("serve_args", nargs="*", help="more options for sluice serve (after --)")
    args = ap.parse_args()
    port = free_port()
    cmd = [args.sluice, "serve", "-m", args.model, "--port", str(port)] + args.serve_args
    # the server's request log goes to a file: a pipe nobody reads fills up, and then the server waits on
    # its log (the first run of this program saw exactly that)
    log_path = os.path.splitext(args.json)[0] + ".serve.log"
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    log = open(log_path, "wb")
    srv = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    t0 = time.monotonic()
    deadline = t0 + args.duration
    st = Stats()
    th = [threading.Thread(target=client, args=(i, args, port, deadline, st), daemon=True) for i in range(args.clients)]
    for t in th:
        t.start()
    samples = []
    while time.monotonic() < deadline:
        rss, fds = sample(srv.pid)
        with st.lock:
            done = sum(st.by.values())
        samples.append({"t": round(time.monotonic() - t0, 1), "rss_mib": round(rss / 2**20, 1), "fds": fds,
                        "requests": done})
        print(f"t={samples[-1]['t']:6.1f}s rss {samples[-1]['rss_mib']:7.1f} MiB fds {fds:4d} requests {done}",
              flush=True)
        time.sleep(min(args.interval, max(0, deadline - time.monotonic())))
    for t in th:
        t.join(timeout=180)
    rss, fds = sample(srv.pid)
    samples.append({"t": round(time.monotonic() - t0, 1), "rss_mib": round(rss / 2**20, 1), "fds": fds,
                    "requests": sum(st.by.values())})
    health, _ = ordinary(random.Random(0), port, False)
    srv.send_signal(signal.SIGINT)
    try:
        rc = srv.wait(timeout=60)
    except subprocess.TimeoutExpired:
        srv.kill()
        rc = "hung"
    warm = [s for s in samples if s["t"] >= min(60, args.duration / 5)]
    rss_span = max(s["rss_mib"] for s in warm) - min(s["rss_mib"] for s in warm) if warm else 0
    fd_span = max(s["fds"] for s in warm) - min(s["fds"] for s in warm) if warm else 0
    out = {
        "command": " ".join(sys.argv), "serve": " ".join(cmd), "clients": args.clients, "duration_s": args.duration,
        "requests": {f"{k} {s}": n for (k, s), n in sorted(st.by.items())}, "total": sum(st.by.values()),
        "tokens": st.tokens, "unexpected": st.errors, "samples": samples,
        "rss_span_after_warmup_mib": round(rss_span, 1), "fd_span_after_warmup": fd_span,
        "answers_after": health, "exit_status": rc,
        "serve_log": log_path,
    }
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps({k: v for k, v in out.items() if k != "samples"}, indent=1))
    ok = not st.errors and health == 200 and rc == 0
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
