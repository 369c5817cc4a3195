"""A mock model API on loopback for the real agent CLIs (tests/integration/
test_agents.py): Anthropic's Messages API (`POST /v1/messages`, streaming
SSE as Claude Code asks for it), OpenAI's Responses API (`POST
/v1/responses`, SSE as Codex reads it) and Gemini's generateContent
(`:streamGenerateContent?alt=sse`, as Gemini CLI reads it with
GOOGLE_GEMINI_BASE_URL). The first request that offers a
shell tool is answered with a call of that tool running `SCRIPT`; the
request that carries its result is answered with a final message. Every
request body is kept (`requests`) so a test can read the tool result the
agent sent back."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SCRIPT = "cat ~/.ssh/id_rsa; touch ~/planted; echo done-running"
FINAL = "All done."


def _sse(events) -> bytes:
    return b"".join(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
                    for name, data in events)


def anthropic_events(request: dict) -> list:
    """The stream answering one Messages request."""
    messages = request.get("messages") or []
    last = messages[-1]["content"] if messages else ""
    has_result = isinstance(last, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in last)
    tools = {t.get("name") for t in request.get("tools") or []}
    model = request.get("model", "claude")
    start = {"type": "message_start", "message": {
        "id": "msg_mock", "type": "message", "role": "assistant", "model": model,
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 1}}}
    if "Bash" in tools and not has_result:
        block = {"type": "tool_use", "id": "toolu_mock1", "name": "Bash", "input": {}}
        delta = {"type": "input_json_delta",
                 "partial_json": json.dumps({"command": SCRIPT, "description": "probe"})}
        stop = "tool_use"
    else:
        block = {"type": "text", "text": ""}
        delta = {"type": "text_delta", "text": FINAL}
        stop = "end_turn"
    return [("message_start", start),
            ("content_block_start", {"type": "content_block_start", "index": 0,
                                     "content_block": block}),
            ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("message_delta", {"type": "message_delta",
                               "delta": {"stop_reason": stop, "stop_sequence": None},
                               "usage": {"output_tokens": 5}}),
            ("message_stop", {"type": "message_stop"})]


def _shell_tool(request: dict) -> str | None:
    names = [t.get("name") for t in request.get("tools") or [] if isinstance(t, dict)]
    for name in ("shell_command", "exec_command", "shell", "local_shell"):
        if name in names:
            return name
    return None


def responses_events(request: dict) -> list:
    """The stream answering one Responses request (Codex)."""
    items = request.get("input") or []
    has_result = any(isinstance(i, dict) and i.get("type") == "function_call_output"
                     for i in items)
    tool = _shell_tool(request)
    response = {"id": "resp_mock", "object": "response", "status": "in_progress", "output": []}
    if tool and not has_result:
        if tool == "shell":
            arguments = {"command": ["bash", "-lc", SCRIPT]}
        elif tool == "exec_command":
            arguments = {"cmd": SCRIPT}
        else:
            arguments = {"command": SCRIPT}
        item = {"type": "function_call", "id": "fc_mock1", "call_id": "call_mock1",
                "name": tool, "arguments": json.dumps(arguments), "status": "completed"}
    else:
        item = {"type": "message", "id": "msg_mock", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": FINAL, "annotations": []}]}
    done = dict(response, status="completed", output=[item],
                usage={"input_tokens": 10, "output_tokens": 5, "total_tokens": 15,
                       "input_tokens_details": {"cached_tokens": 0},
                       "output_tokens_details": {"reasoning_tokens": 0}})
    return [("response.created", {"type": "response.created", "response": response}),
            ("response.output_item.added", {"type": "response.output_item.added",
                                            "output_index": 0, "item": item}),
            ("response.output_item.done", {"type": "response.output_item.done",
                                           "output_index": 0, "item": item}),
            ("response.completed", {"type": "response.completed", "response": done})]


def gemini_chunk(request: dict) -> dict:
    """The one chunk answering a Gemini generateContent request."""
    contents = request.get("contents") or []
    has_result = any(isinstance(part, dict) and "functionResponse" in part
                     for content in contents for part in content.get("parts") or [])
    tools = {d.get("name") for t in request.get("tools") or []
             for d in t.get("functionDeclarations") or []}
    if "run_shell_command" in tools and not has_result:
        part = {"functionCall": {"name": "run_shell_command",
                                 "args": {"command": SCRIPT, "description": "probe"}}}
    else:
        part = {"text": FINAL}
    return {"candidates": [{"content": {"role": "model", "parts": [part]},
                            "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5,
                              "totalTokenCount": 15}}


class MockAPI:
    """Start with `with MockAPI() as api:`; `api.url` is the base URL."""

    def __init__(self):
        self.requests: list[tuple[str, dict]] = []
        self.headers: list[dict] = []       # each POST's headers (lower-case names)
        mock = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_HEAD(self):
                self.do_GET()

            def do_POST(self):
                size = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(size)
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {}
                path = self.path.split("?")[0]
                mock.requests.append((path, body))
                mock.headers.append({k.lower(): v for k, v in self.headers.items()})
                if path.endswith("/messages/count_tokens"):
                    self._json({"input_tokens": 10})
                elif path.endswith("/messages"):
                    events = anthropic_events(body)
                    if body.get("stream"):
                        self._stream(_sse(events))
                    else:
                        message = dict(events[0][1]["message"], stop_reason="end_turn",
                                       content=[{"type": "text", "text": FINAL}])
                        self._json(message)
                elif path.endswith("/responses"):
                    self._stream(_sse(responses_events(body)))
                elif path.endswith(":streamGenerateContent"):
                    self._stream(f"data: {json.dumps(gemini_chunk(body))}\r\n\r\n".encode())
                elif path.endswith(":generateContent"):
                    self._json(gemini_chunk(body))
                elif path.endswith(":countTokens"):
                    self._json({"totalTokens": 10})
                else:
                    self._json({}, status=404)

            def _json(self, data, status=200):
                payload = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _stream(self, payload: bytes):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def tool_results(self) -> list[str]:
        """The text of every tool result the agent sent back."""
        found = []
        for _, body in self.requests:
            for message in body.get("messages") or []:
                content = message.get("content")
                for block in content if isinstance(content, list) else []:
                    if isinstance(block, dict) and block.get("type") == "tool_result":
                        inner = block.get("content")
                        found.append(inner if isinstance(inner, str) else json.dumps(inner))
            for content in body.get("contents") or []:
                for part in content.get("parts") or []:
                    if isinstance(part, dict) and "functionResponse" in part:
                        found.append(json.dumps(part["functionResponse"]))
            for item in body.get("input") or []:
                if isinstance(item, dict) and item.get("type") == "function_call_output":
                    output = item.get("output")
                    found.append(output if isinstance(output, str) else json.dumps(output))
        return found
