#!/usr/bin/env python3
"""Structured outputs through `mtp serve` with the official `openai` and `ollama` clients.

Dev-time only (the Rust tests in crates/runner/tests/server_structured.rs and
structured_outputs.rs are what CI runs). Starts `mtp serve` on the default pair (MTP assistant)
and on the real model (Gemma 3 270M Q4_K_M GGUF with prompt lookup and a turn-format chat
template, tools/serve_clients/gemma3_turns.jinja), then with each server:

* openai: `client.chat.completions.parse(..., response_format=PydanticModel)` (the client's
  structured-output helper), `response_format={"type": "json_schema", ...}` streamed and not,
  `json_object`;
* ollama: `chat(..., format=Model.model_json_schema())`, `generate(format="json")`;
* generated schemas (objects, nested objects, `$defs`/`$ref` from nested pydantic models,
  optional fields (`anyOf` with null), enums, arrays, bounded strings, integers in ranges and
  open-ended integers and numbers), greedy and sampled, alternating between the two clients;
* pydantic models with unbounded `int` and `float` fields (the grammar bounds their digits),
  greedy and sampled, with both clients.

Every output must parse and validate against its schema with the `jsonschema` package (an
independent validator). Prints one line per check and writes a JSON summary (--out).

  python3 -m venv /work/venv-serve && /work/venv-serve/bin/pip install openai ollama pydantic jsonschema
  cargo build --release -p runner --bin mtp
  /work/venv-serve/bin/python tools/serve_clients/check_structured.py --mtp target/release/mtp
"""

import argparse
import importlib.metadata
import json
import os
import pathlib
import random
import socket
import subprocess
import sys
import time
from typing import Annotated, List, Literal, Optional

import jsonschema
import ollama
import openai
from pydantic import BaseModel, Field

ROOT = pathlib.Path(__file__).resolve().parents[2]
REAL_MODEL = pathlib.Path(os.environ.get("MTP_REAL_MODELS_DIR", pathlib.Path.home() / ".cache/mtp-rs/models")) / "gemma-3-270m-q4_k_m.gguf"


class Address(BaseModel):
    city: str = Field(max_length=30)
    zip: int = Field(ge=0, le=99999)


# Every string and list is bounded: a tiny model decoding greedily can otherwise stay inside one
# string until the token budget ends it (the grammar allows any length).
class Person(BaseModel):
    name: str = Field(max_length=30)
    age: int = Field(ge=0, le=120)
    kind: Literal["friend", "colleague", "family"]
    address: Address
    nickname: Optional[str] = Field(default=None, max_length=20)
    hobbies: List[Annotated[str, Field(max_length=20)]] = Field(max_length=3)


# Numbers the schema leaves open: the grammar bounds their digits, so a weak model's reply ends.
class Tally(BaseModel):
    label: str = Field(max_length=20)
    count: int
    ratio: float
    offsets: List[int] = Field(max_length=3)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(mtp: str, extra: List[str]):
    port = free_port()
    server = subprocess.Popen([mtp, "serve", "--port", str(port)] + extra, cwd=ROOT,
                              stderr=subprocess.DEVNULL)
    for _ in range(1200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return server, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("the server did not start")


def bounded_string(rng):
    return {"type": "string", "maxLength": rng.randint(1, 16)}


def random_value_schema(rng, depth):
    kinds = ["string", "integer", "boolean", "enum", "open number", "array", "object", "optional"]
    kind = rng.choice(kinds if depth < 2 else kinds[:5])
    if kind == "string":
        return bounded_string(rng)
    if kind == "integer":
        lo = rng.randint(-100, 100)
        return {"type": "integer", "minimum": lo, "maximum": lo + rng.randint(0, 500)}
    if kind == "open number":
        return rng.choice([{"type": "integer"}, {"type": "number"}, {"type": "integer", "minimum": 0}])
    if kind == "boolean":
        return {"type": "boolean"}
    if kind == "enum":
        return {"enum": rng.sample(["north", "south", "east", "west", "up", "down"], rng.randint(1, 4))}
    if kind == "array":
        return {"type": "array", "items": random_value_schema(rng, depth + 1), "maxItems": rng.randint(1, 3)}
    if kind == "optional":
        return {"anyOf": [random_value_schema(rng, depth + 1), {"type": "null"}]}
    return random_object_schema(rng, depth + 1)


def random_object_schema(rng, depth=0):
    names = rng.sample(["id", "title", "count", "flag", "items", "owner", "note", "level", "tags"],
                       rng.randint(1, 5))
    props = {n: random_value_schema(rng, depth) for n in names}
    return {"type": "object", "properties": props, "required": names, "additionalProperties": False}


def generated_schemas(count, seed):
    rng = random.Random(seed)
    schemas = [random_object_schema(rng) for _ in range(count - 2)]
    schemas.append(Person.model_json_schema())
    schemas.append(Address.model_json_schema())
    return schemas


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mtp", default=str(ROOT / "target/release/mtp"))
    ap.add_argument("--schemas", type=int, default=52, help="generated schemas per server")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/structured/clients.json"))
    args = ap.parse_args()

    servers = [("default pair", [])]
    if REAL_MODEL.is_file():
        servers.append(("gemma-3-270m Q4_K_M", ["--model", str(REAL_MODEL), "--draft-kind", "ngram",
                                                 "--chat-template", str(ROOT / "tools/serve_clients/gemma3_turns.jinja")]))
    else:
        print(f"skipping the real model: {REAL_MODEL} not fetched")
    results = {}
    summary = {"servers": {}}

    def check(name, ok, detail=""):
        results[name] = bool(ok)
        print(f"{'ok  ' if ok else 'FAIL'} {name} {detail}")

    for label, extra in servers:
        server, base = start(args.mtp, extra)
        stats = {"schemas": 0, "valid": 0, "greedy": 0, "sampled": 0, "forced_drafts": 0, "drafted": 0}
        try:
            client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused")
            oc = ollama.Client(host=base)
            model = client.models.list().data[0].id
            msgs = [{"role": "user", "content": "Describe a person you know."}]

            r = client.chat.completions.parse(model=model, messages=msgs, response_format=Person,
                                              temperature=0, max_tokens=400)
            parsed = r.choices[0].message.parsed
            check(f"{label}: openai parse (pydantic)", isinstance(parsed, Person),
                  repr(r.choices[0].message.content[:80]))

            schema = {"type": "object", "properties": {"answer": {"type": "string", "maxLength": 40},
                                                       "sure": {"type": "boolean"}},
                      "required": ["answer", "sure"], "additionalProperties": False}
            rf = {"type": "json_schema", "json_schema": {"name": "answer", "strict": True, "schema": schema}}
            r = client.chat.completions.create(model=model, messages=msgs, response_format=rf,
                                               temperature=0.8, seed=1, max_tokens=200)
            content = r.choices[0].message.content
            jsonschema.validate(json.loads(content), schema)
            check(f"{label}: openai json_schema", True, repr(content[:80]))
            text = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
                model=model, messages=msgs, response_format=rf, temperature=0, max_tokens=200, stream=True)
                if c.choices)
            jsonschema.validate(json.loads(text), schema)
            check(f"{label}: openai json_schema stream", True, repr(text[:80]))
            r = client.chat.completions.create(model=model, messages=msgs, temperature=0, max_tokens=300,
                                               response_format={"type": "json_object"})
            content = r.choices[0].message.content
            ok = (r.choices[0].finish_reason == "stop" and isinstance(json.loads(content), dict)) or \
                 (r.choices[0].finish_reason == "length" and getattr(r, "structured_output", None) == "incomplete")
            check(f"{label}: openai json_object", ok, f"finish={r.choices[0].finish_reason} {content[:60]!r}")

            for temperature in (0, 0.8):
                r = client.chat.completions.parse(model=model, messages=msgs, response_format=Tally,
                                                  temperature=temperature, seed=3, max_tokens=400)
                parsed = r.choices[0].message.parsed
                check(f"{label}: openai parse, unbounded int/float (T {temperature})", isinstance(parsed, Tally),
                      repr(r.choices[0].message.content[:80]))
                r = oc.chat(model=model, messages=msgs, format=Tally.model_json_schema(),
                            options={"temperature": temperature, "seed": 3, "num_predict": 400})
                Tally.model_validate_json(r.message.content)
                check(f"{label}: ollama chat format=schema, unbounded int/float (T {temperature})", True,
                      repr(r.message.content[:80]))

            r = oc.chat(model=model, messages=msgs, format=Person.model_json_schema(),
                        options={"temperature": 0, "num_predict": 400})
            Person.model_validate_json(r.message.content)
            check(f"{label}: ollama chat format=schema", True, repr(r.message.content[:80]))
            r = oc.generate(model=model, prompt="A JSON object: ", raw=True, format="json",
                            options={"temperature": 0, "num_predict": 300})
            ok = (r.done_reason == "stop" and isinstance(json.loads(r.response), dict)) or r.done_reason == "length"
            check(f"{label}: ollama generate format=json", ok, f"done={r.done_reason} {r.response[:60]!r}")

            failures = []
            for i, schema in enumerate(generated_schemas(args.schemas, seed=7)):
                greedy = i % 2 == 0
                temperature = 0 if greedy else 0.9
                if i % 4 < 2:
                    r = client.chat.completions.create(
                        model=model, messages=msgs, temperature=temperature, seed=i, max_tokens=600,
                        response_format={"type": "json_schema", "json_schema": {"name": f"s{i}", "schema": schema}})
                    content, finish = r.choices[0].message.content, r.choices[0].finish_reason
                    mtp = (r.model_extra or {}).get("mtp") or {}
                else:
                    r = oc.chat(model=model, messages=msgs, format=schema,
                                options={"temperature": temperature, "seed": i, "num_predict": 600})
                    content, finish = r.message.content, r.done_reason
                    mtp = (r.model_extra or {}).get("mtp") or {}
                stats["schemas"] += 1
                stats["greedy" if greedy else "sampled"] += 1
                stats["forced_drafts"] += mtp.get("forced", 0)
                stats["drafted"] += mtp.get("drafted", 0)
                try:
                    jsonschema.validate(json.loads(content), schema)
                    stats["valid"] += 1
                except Exception as e:  # noqa: BLE001 - every failure is reported
                    failures.append({"schema": schema, "output": content, "finish": finish, "error": str(e)[:200]})
            check(f"{label}: {stats['schemas']} generated schemas validate",
                  stats["valid"] == stats["schemas"], f"{stats['valid']}/{stats['schemas']}")
            stats["failures"] = failures[:5]
        finally:
            server.terminate()
            server.wait(timeout=60)
        summary["servers"][label] = stats
    summary["versions"] = {n: importlib.metadata.version(n) for n in ("openai", "ollama", "pydantic", "jsonschema")}
    summary["passed"] = sum(results.values())
    summary["failed"] = len(results) - summary["passed"]
    summary["checks"] = results
    pathlib.Path(args.out).write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({k: summary[k] for k in ("passed", "failed", "versions")}))
    return 0 if summary["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
