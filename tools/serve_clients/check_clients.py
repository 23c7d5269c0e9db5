#!/usr/bin/env python3
"""Drive `mtp serve` with the official `ollama` and `openai` Python client libraries.

Dev-time only (the Rust tests in crates/runner/tests/server_api.rs are what CI runs). Starts the
server on the default pair on a free port (or uses --url), then, with each client, generates and
chats, streaming and not, at temperature 0, and checks that the streamed text equals the
non-streamed text and that both equal `mtp generate --temperature 0`'s output for the same
prompt. Also checks the errors the clients raise for a wrong model name. Prints one line per
check and a JSON summary; exits non-zero on any failure.

  python3 -m venv /work/venv-serve && /work/venv-serve/bin/pip install ollama openai
  cargo build -p runner --bin mtp
  /work/venv-serve/bin/python tools/serve_clients/check_clients.py --mtp target/debug/mtp
"""

import argparse
import importlib.metadata
import json
import pathlib
import socket
import subprocess
import sys
import time

import ollama
import openai

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROMPT = "In the beginning God created"
QUESTION = "Who made the light?"
N = 24


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def generate_cli(mtp: str, prompt: str, chat: bool) -> str:
    args = [mtp, "generate", "--json", "--temperature", "0", "-n", str(N)]
    if chat:
        args.append("--chat")
    out = subprocess.run(args + [prompt], check=True, capture_output=True, text=True, cwd=ROOT)
    return json.loads(out.stdout)["text"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mtp", default=str(ROOT / "target/debug/mtp"))
    ap.add_argument("--url", help="an already running server (default: start one)")
    args = ap.parse_args()

    server = None
    if args.url:
        base = args.url.rstrip("/")
    else:
        port = free_port()
        server = subprocess.Popen([args.mtp, "serve", "--port", str(port)], cwd=ROOT,
                                  stderr=subprocess.PIPE, text=True)
        base = f"http://127.0.0.1:{port}"
        for _ in range(600):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
    results = {}

    def check(name, ok, detail=""):
        results[name] = bool(ok)
        print(f"{'ok  ' if ok else 'FAIL'} {name} {detail}")

    try:
        want_raw = generate_cli(args.mtp, PROMPT, chat=False)
        want_chat = generate_cli(args.mtp, QUESTION, chat=True)
        model = "default"
        opts = {"temperature": 0, "num_predict": N}

        oc = ollama.Client(host=base)
        r = oc.generate(model=model, prompt=PROMPT, raw=True, options=opts)
        check("ollama generate", r.response == want_raw, repr(r.response[:60]))
        check("ollama generate fields", r.done and r.done_reason in ("stop", "length") and r.eval_count
              and r.total_duration, f"done_reason={r.done_reason} eval_count={r.eval_count}")
        parts = list(oc.generate(model=model, prompt=PROMPT, raw=True, options=opts, stream=True))
        check("ollama generate stream", "".join(p.response for p in parts) == want_raw,
              f"{len(parts)} chunks")
        msgs = [{"role": "user", "content": QUESTION}]
        r = oc.chat(model=model, messages=msgs, options=opts)
        check("ollama chat", r.message.content == want_chat, repr(r.message.content[:60]))
        parts = list(oc.chat(model=model, messages=msgs, options=opts, stream=True))
        check("ollama chat stream", "".join(p.message.content for p in parts) == want_chat,
              f"{len(parts)} chunks")
        check("ollama list", [m.model for m in oc.list().models] == [model])
        check("ollama show", "start_of_turn" in (oc.show(model).template or ""))
        check("ollama ps", oc.ps().models[0].model == model)
        try:
            oc.generate(model="nope", prompt="x")
            check("ollama wrong model", False)
        except ollama.ResponseError as e:
            check("ollama wrong model", e.status_code == 404, str(e))

        client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused")
        r = client.chat.completions.create(model=model, messages=msgs, temperature=0, max_tokens=N)
        check("openai chat", r.choices[0].message.content == want_chat,
              f"finish_reason={r.choices[0].finish_reason} usage={r.usage.completion_tokens}")
        stream = client.chat.completions.create(model=model, messages=msgs, temperature=0, max_tokens=N,
                                                stream=True, stream_options={"include_usage": True})
        text, usage = "", None
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
            if chunk.usage:
                usage = chunk.usage
        check("openai chat stream", text == want_chat and usage is not None,
              f"usage={usage.completion_tokens if usage else None}")
        r = client.completions.create(model=model, prompt=PROMPT, temperature=0, max_tokens=N)
        check("openai completions", r.choices[0].text == want_raw)
        text = "".join(c.choices[0].text for c in client.completions.create(
            model=model, prompt=PROMPT, temperature=0, max_tokens=N, stream=True) if c.choices)
        check("openai completions stream", text == want_raw)
        check("openai models", [m.id for m in client.models.list().data] == [model])
        try:
            client.chat.completions.create(model="nope", messages=msgs)
            check("openai wrong model", False)
        except openai.NotFoundError as e:
            check("openai wrong model", True, str(e)[:80])
        try:
            client.chat.completions.create(model=model, messages=msgs, n=2)
            check("openai n=2 refused", False)
        except openai.BadRequestError as e:
            check("openai n=2 refused", True, str(e)[:80])
    finally:
        if server:
            server.terminate()
            code = server.wait(timeout=60)
            check("server exits 0 on SIGTERM", code == 0, f"exit {code}")
    versions = {name: importlib.metadata.version(name) for name in ("ollama", "openai")}
    print(json.dumps({"versions": versions, "passed": sum(results.values()), "failed":
                      len(results) - sum(results.values())}))
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
