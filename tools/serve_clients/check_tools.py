#!/usr/bin/env python3
"""Tool calls through `mtp serve` with the official `openai` and `ollama` clients.

Dev-time only (crates/runner/tests/server_tools.rs is what CI runs). Serves the default pair and
the real model (Gemma 3 270M Q4_K_M GGUF, prompt lookup), both with
models/templates/gemma3-functions.jinja (FunctionGemma's call markers), and with each client
makes a round trip: a request with tools whose choice forces a call (OpenAI `tool_choice`;
ollama `options.tool_choice`, an extension: ollama's API has no way to force one) returns a
call with JSON arguments that follow the tool's parameter schema; the call and the tool's
result go back in the conversation; the model answers with text. OpenAI's streamed call is
checked too, forced calls whose integer and number parameters have no bounds end with a call,
greedy and sampled, and a call cut by `max_tokens` ends with `length` and is reported. Prints one line per check and writes a JSON summary (--out).

  /work/venv-serve/bin/python tools/serve_clients/check_tools.py --mtp target/release/mtp
"""

import argparse
import importlib.metadata
import json
import os
import pathlib
import sys

import jsonschema
import ollama
import openai

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from check_structured import REAL_MODEL, ROOT, start  # noqa: E402

TEMPLATE = ROOT / "models/templates/gemma3-functions.jinja"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 30},
                           "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
        },
    },
}
# Integer and number parameters without bounds: the grammar bounds their digits.
VERSE = {"type": "function", "function": {
    "name": "find_verse", "description": "A verse of a book of the Bible",
    "parameters": {"type": "object", "properties": {"chapter": {"type": "integer"},
                                                   "verse": {"type": "integer"},
                                                   "weight": {"type": "number"}},
                   "required": ["chapter", "verse", "weight"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "The time in a city",
                                         "parameters": {"type": "object", "properties": {}}}}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mtp", default=str(ROOT / "target/release/mtp"))
    ap.add_argument("--out", default=str(ROOT / "benchmarks/structured/tools-clients.json"))
    args = ap.parse_args()
    servers = [("default pair", ["--chat-template", str(TEMPLATE)])]
    if REAL_MODEL.is_file():
        servers.append(("gemma-3-270m Q4_K_M", ["--model", str(REAL_MODEL), "--draft-kind", "ngram",
                                                 "--chat-template", str(TEMPLATE)]))
    results, calls_seen = {}, {}

    def check(name, ok, detail=""):
        results[name] = bool(ok)
        print(f"{'ok  ' if ok else 'FAIL'} {name} {detail}")

    params = WEATHER["function"]["parameters"]
    for label, extra in servers:
        server, base = start(args.mtp, extra)
        try:
            client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused")
            model = client.models.list().data[0].id
            msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
            r = client.chat.completions.create(model=model, messages=msgs, tools=[WEATHER, TIME],
                                               tool_choice="required", temperature=0, max_tokens=150)
            choice = r.choices[0]
            calls = choice.message.tool_calls or []
            ok = choice.finish_reason == "tool_calls" and len(calls) == 1
            arguments = json.loads(calls[0].function.arguments) if ok else None
            if ok and calls[0].function.name == "get_weather":
                jsonschema.validate(arguments, params)
            check(f"{label}: openai call (tool_choice required)", ok,
                  f"{calls[0].function.name}({arguments})" if ok else repr(choice.message))
            calls_seen[f"{label} openai"] = f"{calls[0].function.name}({arguments})" if ok else None
            if ok:
                msgs2 = msgs + [choice.message.model_dump(exclude_none=True),
                                {"role": "tool", "tool_call_id": calls[0].id, "content": "sunny, 21 C"}]
                r2 = client.chat.completions.create(model=model, messages=msgs2, tools=[WEATHER, TIME],
                                                    temperature=0, max_tokens=40)
                check(f"{label}: openai answer after the tool result",
                      isinstance(r2.choices[0].message.content, str), repr(r2.choices[0].message.content)[:80])
            stream = client.chat.completions.create(
                model=model, messages=msgs, tools=[WEATHER, TIME], stream=True, temperature=0, max_tokens=150,
                tool_choice={"type": "function", "function": {"name": "get_weather"}})
            deltas, finish = [], None
            for chunk in stream:
                if chunk.choices:
                    deltas.extend(chunk.choices[0].delta.tool_calls or [])
                    finish = chunk.choices[0].finish_reason or finish
            ok = len(deltas) == 1 and deltas[0].function.name == "get_weather" and finish == "tool_calls"
            if ok:
                jsonschema.validate(json.loads(deltas[0].function.arguments), params)
            check(f"{label}: openai streamed call (named choice)", ok, f"finish={finish}")

            oc = ollama.Client(host=base)
            verse_params = VERSE["function"]["parameters"]
            for temperature in (0, 0.8):
                ask = [{"role": "user", "content": "Which verse tells of the flood?"}]
                r = client.chat.completions.create(model=model, messages=ask, tools=[VERSE],
                                                   tool_choice="required", temperature=temperature,
                                                   seed=5, max_tokens=400)
                choice = r.choices[0]
                calls = choice.message.tool_calls or []
                ok = choice.finish_reason == "tool_calls" and len(calls) == 1
                if ok:
                    jsonschema.validate(json.loads(calls[0].function.arguments), verse_params)
                check(f"{label}: openai forced call, integer parameters (T {temperature})", ok,
                      calls[0].function.arguments if ok else f"finish={choice.finish_reason}")
                r = oc.chat(model=model, messages=ask, tools=[VERSE],
                            options={"temperature": temperature, "seed": 5, "num_predict": 400,
                                     "tool_choice": "required"})
                calls = r.message.tool_calls or []
                ok = len(calls) == 1 and r.done_reason == "stop"
                if ok:
                    jsonschema.validate(dict(calls[0].function.arguments), verse_params)
                check(f"{label}: ollama forced call, integer parameters (T {temperature})", ok,
                      str(dict(calls[0].function.arguments)) if ok else f"done={r.done_reason}")
            whole = client.chat.completions.create(model=model, messages=msgs, tools=[VERSE],
                                                   tool_choice="required", temperature=0, max_tokens=400)
            r = client.chat.completions.create(model=model, messages=msgs, tools=[VERSE],
                                               tool_choice="required", temperature=0,
                                               max_tokens=whole.usage.completion_tokens * 2 // 3)
            calls = r.choices[0].message.tool_calls or []
            check(f"{label}: openai forced call cut by max_tokens says length, the call so far reported",
                  r.choices[0].finish_reason == "length" and len(calls) == 1
                  and calls[0].function.name == "find_verse",
                  f"finish={r.choices[0].finish_reason} {calls[0].function.arguments if calls else None!r}")

            r = oc.chat(model=model, messages=msgs, tools=[WEATHER, TIME],
                        options={"temperature": 0, "num_predict": 150, "tool_choice": "required"})
            calls = r.message.tool_calls or []
            ok = len(calls) == 1
            if ok and calls[0].function.name == "get_weather":
                jsonschema.validate(dict(calls[0].function.arguments), params)
            detail = f"{calls[0].function.name}({dict(calls[0].function.arguments)})" if ok else repr(r.message)
            check(f"{label}: ollama call (options.tool_choice required)", ok, detail)
            calls_seen[f"{label} ollama"] = detail if ok else None
            if ok:
                msgs2 = msgs + [r.message, {"role": "tool", "content": "sunny, 21 C",
                                            "tool_name": calls[0].function.name}]
                r2 = oc.chat(model=model, messages=msgs2, tools=[WEATHER, TIME],
                             options={"temperature": 0, "num_predict": 40})
                check(f"{label}: ollama answer after the tool result", isinstance(r2.message.content, str),
                      repr(r2.message.content)[:80])
        finally:
            server.terminate()
            server.wait(timeout=60)
    summary = {
        "versions": {n: importlib.metadata.version(n) for n in ("openai", "ollama", "jsonschema")},
        "passed": sum(results.values()),
        "failed": len(results) - sum(results.values()),
        "checks": results,
        "calls": calls_seen,
    }
    pathlib.Path(args.out).write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({k: summary[k] for k in ("passed", "failed", "versions")}))
    return 0 if summary["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
