#!/usr/bin/env python3
"""A loopback model server for the real reviewer CLIs (codex, claude, gemini) in tests.

It speaks the three wire APIs the CLIs use, with server-sent events: the Anthropic Messages
API (claude), the OpenAI Responses API (codex) and the Gemini generateContent API (gemini).
The "model" is a script (re-read on every request): for each provider, the answer to give (a tool call to the tool whose
name contains `submit_review` or `submit_harden`, or a final text message). Every request is logged as one JSON
line so tests can assert what each CLI was given: the tools offered, the output schema, the
system prompt and messages. Codex's output schema is checked against OpenAI's strict
structured-output rules and refused with HTTP 400 the way the service refuses it.

Usage: model_server.py --script SCRIPT.json --log LOG.jsonl   (prints the port on stdout)
Script: {"claude": {"tool_input": {...}}, "gemini": {"tool_input": {...}}, "codex": {"text": "..."}}
A top-level "fail": STATUS answers every model call with that HTTP error (a model API that
only refuses, for liveness tests).
Claude and gemini answers may carry "steps": [{"name": TOOL, "input": {...}}, ...], tool calls
the model makes one per turn before it submits, to try what a hostile reviewer would try.
"""

import argparse
import http.server
import json
import sys
import threading
import uuid

SCRIPT_PATH = None
LOG_PATH = None
LOG_LOCK = threading.Lock()

# Keywords OpenAI's strict mode supports; anything else is refused.
STRICT_KEYWORDS = {
    "type", "properties", "required", "additionalProperties", "items", "enum", "anyOf",
    "description", "title", "const", "$defs", "definitions", "$ref", "pattern", "format",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
    "minItems", "maxItems", "default",
}


def script():
    """The answers to give, re-read on every request so a test can change them between runs."""
    with open(SCRIPT_PATH, encoding="utf-8") as f:
        return json.load(f)


def log(entry):
    with LOG_LOCK:
        with open(LOG_PATH, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")


def strict_problems(schema, path="schema", root=True):
    """Why OpenAI's strict structured outputs would refuse `schema` (empty when it complies)."""
    problems = []
    if not isinstance(schema, dict):
        return [f"{path}: a schema must be an object"]
    if root:
        for key in ("$schema", "$id"):
            if key in schema:
                problems.append(f"{path}: '{key}' is not permitted")
        if schema.get("type") != "object":
            problems.append(f"{path}: the root must be of type 'object'")
    for key in schema:
        if key not in STRICT_KEYWORDS and not (root and key in ("$schema", "$id")):
            problems.append(f"{path}: '{key}' is not supported")
    if "anyOf" in schema:
        for i, option in enumerate(schema["anyOf"]):
            problems += strict_problems(option, f"{path}.anyOf[{i}]", False)
        return problems
    if "$ref" in schema:
        return problems
    if "type" not in schema:
        problems.append(f"{path}: schema must have a 'type' key")
        return problems
    types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    if "object" in types:
        props = schema.get("properties", {})
        if schema.get("additionalProperties") is not False:
            problems.append(f"{path}: 'additionalProperties' is required to be supplied and to be false")
        required = schema.get("required", [])
        missing = [k for k in props if k not in required]
        if missing:
            problems.append(f"{path}: 'required' is required to be supplied and to be an array including every key in properties. Missing {missing}")
        for key, prop in props.items():
            problems += strict_problems(prop, f"{path}.properties.{key}", False)
    if "array" in types and "items" in schema:
        problems += strict_problems(schema["items"], f"{path}.items", False)
    for defs in ("$defs", "definitions"):
        for key, sub in schema.get(defs, {}).items():
            problems += strict_problems(sub, f"{path}.{defs}.{key}", False)
    return problems


def instance(schema):
    """Some value that fits a (Gemini-style, upper-case types allowed) JSON schema."""
    kind = str(schema.get("type", "object")).lower()
    if "enum" in schema:
        return schema["enum"][0]
    if kind == "object":
        return {k: instance(v) for k, v in schema.get("properties", {}).items()}
    if kind == "array":
        return []
    if kind in ("integer", "number"):
        return 50
    if kind == "boolean":
        return False
    return "x"


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def body(self):
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw or b"{}")
        except ValueError:
            return {}

    def send_json(self, status, value):
        data = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_events(self, events, named=True):
        """Server-sent events: (name, data) pairs; `named=False` writes data lines only."""
        chunks = []
        for name, data in events:
            prefix = f"event: {name}\n" if named else ""
            chunks.append(f"{prefix}data: {json.dumps(data)}\n\n")
        payload = "".join(chunks).encode()
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self):
        log({"provider": "unknown", "method": "GET", "path": self.path})
        if self.path.startswith("/v1/models"):
            self.send_json(200, {"object": "list", "data": [], "models": []})
        else:
            self.send_json(404, {"error": {"message": f"no such endpoint: {self.path}"}})

    def do_POST(self):
        body = self.body()
        path = self.path.split("?")[0]
        status = script().get("fail")
        if status:
            log({"provider": "fail", "path": path, "status": status})
            self.send_json(status, {"error": {"code": status, "message": "injected failure", "status": "INTERNAL"}})
            return
        if path.startswith("/v1/messages"):
            self.anthropic(path, body)
        elif path.startswith("/v1/responses"):
            self.openai(body)
        elif path.startswith("/v1beta/models/") or path.startswith("/v1/models/"):
            self.gemini(path, body)
        else:
            log({"provider": "unknown", "method": "POST", "path": self.path})
            self.send_json(404, {"error": {"message": f"no such endpoint: {self.path}"}})

    # --- Anthropic Messages API (claude) ---------------------------------------------------

    def anthropic(self, path, body):
        if path.endswith("/count_tokens"):
            self.send_json(200, {"input_tokens": 100})
            return
        tools = [t.get("name") for t in body.get("tools", [])]
        system = body.get("system")
        system_text = system if isinstance(system, str) else "\n".join(
            b.get("text", "") for b in (system or []) if isinstance(b, dict))
        messages = body.get("messages", [])
        log({"provider": "claude", "path": path, "model": body.get("model"), "tools": tools,
             "system": system_text, "messages": json.dumps(messages)})
        calls = [block.get("name") for m in messages if m.get("role") == "assistant"
                 for block in (m.get("content") if isinstance(m.get("content"), list) else [])
                 if isinstance(block, dict) and block.get("type") == "tool_use"]
        submit = next((t for t in tools if t and ("submit_review" in t or "submit_harden" in t)), None)
        submitted = submit in calls
        answer = script().get("claude", {})
        steps = answer.get("steps", [])
        msg_id = "msg_" + uuid.uuid4().hex[:12]
        start = {"type": "message_start", "message": {
            "id": msg_id, "type": "message", "role": "assistant", "model": body.get("model", "claude"),
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 1}}}
        if len(calls) < len(steps):
            step = steps[len(calls)]
            arguments = json.dumps(step.get("input", {}))
            block = {"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:12], "name": step["name"], "input": {}}
            delta = {"type": "input_json_delta", "partial_json": arguments}
            stop = "tool_use"
        elif submit and not submitted and "tool_input" in answer:
            arguments = json.dumps(answer["tool_input"])
            block = {"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:12], "name": submit, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": arguments}
            stop = "tool_use"
        else:
            block = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": answer.get("text", "Submitted the review.")}
            stop = "end_turn"
        self.send_events([
            ("message_start", start),
            ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}),
            ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                               "usage": {"output_tokens": 20}}),
            ("message_stop", {"type": "message_stop"}),
        ])

    # --- OpenAI Responses API (codex) ------------------------------------------------------

    def openai(self, body):
        text_format = (body.get("text") or {}).get("format") or {}
        schema = text_format.get("schema")
        tools = []
        def collect(items):
            for t in items or []:
                if isinstance(t, dict):
                    tools.append(t.get("name") or t.get("type"))
                    collect(t.get("tools"))
        collect(body.get("tools"))
        for item in body.get("input", []):
            if isinstance(item, dict) and item.get("type") == "additional_tools":
                collect(item.get("tools"))
        log({"provider": "codex", "path": "/v1/responses", "model": body.get("model"), "tools": tools,
             "schema": schema, "schema_name": text_format.get("name"), "strict": text_format.get("strict"),
             "instructions": body.get("instructions", ""), "input": json.dumps(body.get("input", []))})
        if schema is not None and text_format.get("strict"):
            problems = strict_problems(schema)
            if problems:
                name = text_format.get("name", "response_format")
                self.send_json(400, {"error": {
                    "message": f"Invalid schema for response_format '{name}': In context=(), {problems[0]}",
                    "type": "invalid_request_error", "param": "text.format.schema", "code": "invalid_json_schema"}})
                return
        answer = script().get("codex", {})
        text = answer.get("text", "")
        response_id = "resp_" + uuid.uuid4().hex[:12]
        item_id = "msg_" + uuid.uuid4().hex[:12]
        message = {"type": "message", "id": item_id, "status": "completed", "role": "assistant",
                   "content": [{"type": "output_text", "text": text, "annotations": []}]}
        usage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 20,
                 "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 30}
        response = {"id": response_id, "object": "response", "status": "in_progress",
                    "model": body.get("model"), "output": []}
        done = dict(response, status="completed", output=[message], usage=usage)
        self.send_events([
            ("response.created", {"type": "response.created", "response": response}),
            ("response.output_item.added", {"type": "response.output_item.added", "output_index": 0,
                                            "item": dict(message, status="in_progress", content=[])}),
            ("response.content_part.added", {"type": "response.content_part.added", "item_id": item_id,
                                             "output_index": 0, "content_index": 0,
                                             "part": {"type": "output_text", "text": "", "annotations": []}}),
            ("response.output_text.delta", {"type": "response.output_text.delta", "item_id": item_id,
                                            "output_index": 0, "content_index": 0, "delta": text}),
            ("response.output_text.done", {"type": "response.output_text.done", "item_id": item_id,
                                           "output_index": 0, "content_index": 0, "text": text}),
            ("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": message}),
            ("response.completed", {"type": "response.completed", "response": done}),
        ])

    # --- Gemini generateContent API (gemini) -----------------------------------------------

    def gemini(self, path, body):
        config = body.get("generationConfig") or {}
        declarations = [d.get("name") for t in body.get("tools", []) for d in t.get("functionDeclarations", [])]
        system = body.get("systemInstruction") or {}
        system_text = "\n".join(p.get("text", "") for p in system.get("parts", []))
        contents = body.get("contents", [])
        log({"provider": "gemini", "path": path, "tools": declarations, "system": system_text,
             "contents": json.dumps(contents), "json_schema": bool(config.get("responseJsonSchema"))})
        usage = {"promptTokenCount": 10, "candidatesTokenCount": 20, "totalTokenCount": 30}
        if ":generateContent" in path:
            schema = config.get("responseJsonSchema") or config.get("responseSchema")
            text = json.dumps(instance(schema)) if schema else "ok"
            self.send_json(200, {"candidates": [{"content": {"role": "model", "parts": [{"text": text}]},
                                                 "finishReason": "STOP", "index": 0}],
                                 "usageMetadata": usage})
            return
        calls = [part["functionCall"].get("name") for c in contents if c.get("role") == "model"
                 for part in c.get("parts", []) if "functionCall" in part]
        submit = next((d for d in declarations if d and ("submit_review" in d or "submit_harden" in d)), None)
        answer = script().get("gemini", {})
        steps = answer.get("steps", [])
        if len(calls) < len(steps):
            step = steps[len(calls)]
            parts = [{"functionCall": {"name": step["name"], "args": step.get("input", {})}}]
        elif submit and submit not in calls and "tool_input" in answer:
            parts = [{"functionCall": {"name": submit, "args": answer["tool_input"]}}]
        else:
            parts = [{"text": answer.get("text", "Submitted the review.")}]
        chunk = {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
                 "usageMetadata": usage}
        self.send_events([("message", chunk)], named=False)


def main():
    global SCRIPT_PATH, LOG_PATH
    parser = argparse.ArgumentParser()
    parser.add_argument("--script", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    SCRIPT_PATH = args.script
    script()  # fail at start on a broken script
    LOG_PATH = args.log
    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
