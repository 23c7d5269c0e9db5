//! Tool calls through `mtp serve` on the committed default pair served with
//! `models/templates/gemma3-functions.jinja` (FunctionGemma's markers): OpenAI's `tools` with
//! `tool_choice` required or named make the model call (a grammar), the call comes back as
//! `tool_calls` with JSON arguments and `finish_reason: "tool_calls"`, streamed as a delta too;
//! a conversation with the call and the tool's result renders and answers; ollama's `tools`
//! render, its tool messages are taken, and `options.tool_choice` (an extension) forces a call
//! there too; bad tools and choices are 400s naming the field; a
//! model whose template renders no tools refuses them.

mod server_support;

use std::path::Path;
use std::sync::{Arc, OnceLock};

use axum::http::StatusCode;
use axum::Router;
use runner::server::{self, AppState, ServerConfig};
use serde_json::{json, Value};
use server_support::{call, json_of, pair, runtime, sse, worker, worker_over, NAME};

fn template() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/templates/gemma3-functions.jinja")
}

fn router() -> &'static Router {
    static R: OnceLock<Router> = OnceLock::new();
    R.get_or_init(|| {
        let mut paths = pair();
        paths.chat_template = Some(template());
        server::router(AppState::new(
            Arc::new(worker_over(paths, 16, 1)),
            ServerConfig::default(),
        ))
    })
}

fn weather_tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
         "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                                        "unit": {"enum": ["celsius", "fahrenheit"]}},
                        "required": ["city", "unit"]}}},
        {"type": "function", "function": {"name": "get_time", "description": "The time in a city",
         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
    ])
}

fn ask() -> Value {
    json!([{"role": "user", "content": "What is the weather in Paris?"}])
}

#[test]
fn a_forced_choice_returns_a_call_with_json_arguments() {
    runtime().block_on(async {
        for (choice, allowed) in [
            (json!("required"), vec!["get_weather", "get_time"]),
            (
                json!({"type": "function", "function": {"name": "get_time"}}),
                vec!["get_time"],
            ),
        ] {
            let body = json!({"model": NAME, "messages": ask(), "tools": weather_tools(),
                              "tool_choice": choice, "temperature": 0, "max_tokens": 120});
            let (status, text) = call(router(), "POST", "/v1/chat/completions", Some(body)).await;
            assert_eq!(status, StatusCode::OK, "{text}");
            let v = json_of(&text);
            let choice0 = &v["choices"][0];
            assert_eq!(choice0["finish_reason"], "tool_calls", "{v}");
            assert!(
                choice0["message"]
                    .as_object()
                    .is_some_and(|m| m.contains_key("content"))
                    && choice0["message"]["content"].is_null(),
                "content is null beside the calls: {v}"
            );
            let calls = choice0["message"]["tool_calls"]
                .as_array()
                .expect("tool_calls");
            assert_eq!(calls.len(), 1, "{v}");
            let name = calls[0]["function"]["name"].as_str().expect("name");
            assert!(allowed.contains(&name), "{v}");
            assert_eq!(calls[0]["type"], "function");
            assert!(calls[0]["id"]
                .as_str()
                .is_some_and(|id| id.starts_with("call")));
            let arguments = json_of(
                calls[0]["function"]["arguments"]
                    .as_str()
                    .expect("JSON text"),
            );
            if name == "get_weather" {
                // The parameters' schema shapes the arguments.
                assert!(
                    arguments["city"]
                        .as_str()
                        .is_some_and(|c| c.chars().count() <= 20),
                    "{arguments}"
                );
                assert!(
                    arguments["unit"] == "celsius" || arguments["unit"] == "fahrenheit",
                    "{arguments}"
                );
            } else {
                assert_eq!(arguments, json!({}));
            }
        }
    });
}

#[test]
fn ollama_calls_with_tool_choice_in_its_options() {
    runtime().block_on(async {
        for stream in [false, true] {
            let body = json!({"model": NAME, "messages": ask(), "tools": weather_tools(), "stream": stream,
                              "options": {"temperature": 0, "num_predict": 120,
                                          "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}});
            let (status, text) = call(router(), "POST", "/api/chat", Some(body)).await;
            assert_eq!(status, StatusCode::OK, "{text}");
            let calls: Vec<Value> = text
                .lines()
                .map(json_of)
                .filter_map(|l| l["message"]["tool_calls"].as_array().cloned())
                .flatten()
                .collect();
            assert_eq!(calls.len(), 1, "{text}");
            assert_eq!(calls[0]["function"]["name"], "get_weather");
            assert!(calls[0]["function"]["arguments"]["city"].is_string(), "{text}");
            let content: String = text
                .lines()
                .filter_map(|l| json_of(l)["message"]["content"].as_str().map(String::from))
                .collect();
            assert!(!content.contains("function_call"), "markers leaked: {content:?}");
        }
    });
}

#[test]
fn a_forced_call_streams_as_a_tool_call_delta() {
    runtime().block_on(async {
        let body = json!({"model": NAME, "messages": ask(), "tools": weather_tools(), "stream": true,
                          "tool_choice": "required", "temperature": 0, "max_tokens": 120});
        let (status, text) = call(router(), "POST", "/v1/chat/completions", Some(body)).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let (frames, _) = sse(&text);
        let calls: Vec<&Value> = frames
            .iter()
            .filter_map(|f| f["choices"][0]["delta"]["tool_calls"].as_array())
            .flatten()
            .collect();
        assert_eq!(calls.len(), 1, "{text}");
        assert_eq!(calls[0]["index"], 0);
        let last = frames.iter().rev().find(|f| !f["choices"][0]["finish_reason"].is_null());
        assert_eq!(last.expect("a finish")["choices"][0]["finish_reason"], "tool_calls");
        let content: String = frames
            .iter()
            .filter_map(|f| f["choices"][0]["delta"]["content"].as_str())
            .collect();
        assert!(!content.contains("function_call"), "markers leaked: {content:?}");
    });
}

fn verse_tools() -> Value {
    json!([{"type": "function", "function": {"name": "find_verse", "description": "A verse of a book",
            "parameters": {"type": "object", "properties": {"chapter": {"type": "integer"},
                                                           "verse": {"type": "integer"},
                                                           "weight": {"type": "number"}},
                           "required": ["chapter", "verse", "weight"]}}}])
}

#[test]
fn a_forced_call_with_open_numbers_ends_and_one_cut_short_says_length() {
    runtime().block_on(async {
        let asks = ["Find the verse about the flood.", "Which chapter tells of Moses?", "Look up the first verse."];
        for (i, question) in asks.iter().enumerate() {
            for temperature in [0.0, 0.8] {
                let body = json!({"model": NAME, "messages": [{"role": "user", "content": question}],
                                  "tools": verse_tools(), "tool_choice": "required",
                                  "temperature": temperature, "seed": i, "max_tokens": 400});
                let (status, text) = call(router(), "POST", "/v1/chat/completions", Some(body)).await;
                assert_eq!(status, StatusCode::OK, "{text}");
                let v = json_of(&text);
                assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{v}");
                let arguments = json_of(
                    v["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
                        .as_str()
                        .expect("JSON text"),
                );
                for key in ["chapter", "verse"] {
                    assert!(arguments[key].is_i64(), "{arguments}");
                }
                assert!(arguments["weight"].is_number(), "{arguments}");
            }
        }
        // Cut short by the budget inside the call: `length`, and the call so far where calls go.
        let body = json!({"model": NAME, "messages": ask(), "tools": verse_tools(),
                          "tool_choice": "required", "temperature": 0, "max_tokens": 400});
        let (_, text) = call(router(), "POST", "/v1/chat/completions", Some(body)).await;
        let v = json_of(&text);
        let whole = v["usage"]["completion_tokens"].as_u64().expect("usage");
        let budget = whole * 2 / 3;
        for stream in [false, true] {
            let body = json!({"model": NAME, "messages": ask(), "tools": verse_tools(),
                              "tool_choice": "required", "temperature": 0, "max_tokens": budget,
                              "stream": stream});
            let (status, text) = call(router(), "POST", "/v1/chat/completions", Some(body)).await;
            assert_eq!(status, StatusCode::OK, "{text}");
            let (calls, finish, incomplete) = if stream {
                let (frames, _) = sse(&text);
                let calls: Vec<Value> = frames
                    .iter()
                    .filter_map(|f| f["choices"][0]["delta"]["tool_calls"].as_array())
                    .flatten()
                    .cloned()
                    .collect();
                let last = frames
                    .iter()
                    .rev()
                    .find(|f| !f["choices"][0]["finish_reason"].is_null())
                    .expect("a finish");
                // The extension field rides on the usage chunk, not asked for here.
                (calls, last["choices"][0]["finish_reason"].clone(), true)
            } else {
                let v = json_of(&text);
                let calls = v["choices"][0]["message"]["tool_calls"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                (calls, v["choices"][0]["finish_reason"].clone(), v["structured_output"] == "incomplete")
            };
            assert_eq!(finish, "length", "{text}");
            assert!(incomplete, "{text}");
            assert_eq!(calls.len(), 1, "{text}");
            assert_eq!(calls[0]["function"]["name"], "find_verse", "{text}");
            let arguments = calls[0]["function"]["arguments"].as_str().expect("text");
            assert!(
                arguments.starts_with('{') && serde_json::from_str::<Value>(arguments).is_err(),
                "{arguments:?}"
            );
        }
        let body = json!({"model": NAME, "messages": ask(), "tools": verse_tools(), "stream": false,
                          "options": {"temperature": 0, "num_predict": budget, "tool_choice": "required"}});
        let (status, text) = call(router(), "POST", "/api/chat", Some(body)).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let v = json_of(&text);
        assert_eq!(v["done_reason"], "length", "{v}");
        assert_eq!(v["structured_output"], "incomplete", "{v}");
        assert_eq!(v["message"]["tool_calls"][0]["function"]["name"], "find_verse", "{v}");
        assert!(v["message"]["tool_calls"][0]["function"]["arguments"].is_object(), "{v}");
    });
}

#[test]
fn a_conversation_with_a_call_and_its_result_answers() {
    runtime().block_on(async {
        let messages = json!([
            {"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}
        ]);
        let body = json!({"model": NAME, "messages": messages, "tools": weather_tools(),
                          "tool_choice": "none", "temperature": 0, "max_tokens": 16});
        let (status, text) = call(router(), "POST", "/v1/chat/completions", Some(body)).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let v = json_of(&text);
        assert!(v["choices"][0]["message"]["content"].is_string(), "{v}");
        assert!(v["choices"][0]["message"]["tool_calls"].is_null(), "{v}");

        // ollama's shape: tools, an assistant call with object arguments, a tool message.
        let body = json!({"model": NAME, "stream": false, "tools": weather_tools(),
                          "options": {"temperature": 0, "num_predict": 16},
                          "messages": [
                              {"role": "user", "content": "What is the weather in Paris?"},
                              {"role": "assistant", "content": "", "tool_calls": [
                                  {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
                              {"role": "tool", "tool_name": "get_weather", "content": "sunny"}
                          ]});
        let (status, text) = call(router(), "POST", "/api/chat", Some(body)).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        assert!(json_of(&text)["message"]["content"].is_string());
    });
}

#[test]
fn bad_tools_and_choices_are_400s_naming_the_field() {
    runtime().block_on(async {
        let cases = [
            (json!({"tools": [{"type": "function", "function": {"name": "bad name"}}]}), "tools[0].function.name"),
            (json!({"tools": [{"type": "retrieval"}]}), "tools[0].type"),
            (json!({"tools": weather_tools(), "tool_choice": {"type": "function", "function": {"name": "nope"}}}), "tool_choice"),
            (json!({"tool_choice": "required"}), "tool_choice"),
            (json!({"tools": weather_tools(), "tool_choice": 7}), "tool_choice"),
            (json!({"tools": weather_tools(), "tool_choice": "required",
                    "response_format": {"type": "json_object"}}), "tool_choice"),
            (json!({"messages": [{"role": "tool", "content": "x"}]}), "messages[0]"),
        ];
        for (extra, param) in cases {
            let mut body = json!({"model": NAME, "messages": ask()});
            for (k, v) in extra.as_object().expect("object") {
                body[k] = v.clone();
            }
            let (status, text) = call(router(), "POST", "/v1/chat/completions", Some(body)).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
            assert_eq!(json_of(&text)["error"]["param"], param, "{text}");
        }
        // The default pair's own template renders no tools.
        let plain = server::router(AppState::new(Arc::new(worker(4)), ServerConfig::default()));
        let body = json!({"model": NAME, "messages": ask(), "tools": weather_tools()});
        let (status, text) = call(&plain, "POST", "/v1/chat/completions", Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
        assert!(text.contains("renders no tool calls"), "{text}");
        let body = json!({"model": NAME, "messages": ask(), "tools": weather_tools(), "stream": false});
        let (status, text) = call(&plain, "POST", "/api/chat", Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    });
}

#[test]
fn think_is_taken_where_the_template_can_think_and_refused_elsewhere() {
    runtime().block_on(async {
        // Gemma 4's template (it has `enable_thinking`) over the default pair: the request is
        // rendered with thinking on and answered (this tiny model writes no reasoning channel,
        // so the answer is all content).
        let mut paths = pair();
        paths.chat_template = Some(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../tests/fixtures/chat_templates/gemma4/chat_template.jinja"),
        );
        let thinking = server::router(AppState::new(
            Arc::new(worker_over(paths, 4, 1)),
            ServerConfig::default(),
        ));
        for think in [json!(true), json!("high"), json!(false)] {
            let body = json!({"model": NAME, "messages": ask(), "think": think, "stream": false,
                              "options": {"temperature": 0, "num_predict": 8}});
            let (status, text) = call(&thinking, "POST", "/api/chat", Some(body)).await;
            assert_eq!(status, StatusCode::OK, "{text}");
            assert!(json_of(&text)["message"]["content"].is_string(), "{text}");
        }
        let body = json!({"model": NAME, "messages": ask(), "think": true, "format": "json"});
        let (status, text) = call(&thinking, "POST", "/api/chat", Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
        assert!(text.contains("cannot be combined"), "{text}");
        let body = json!({"model": NAME, "messages": ask(), "think": 7});
        let (status, text) = call(&thinking, "POST", "/api/chat", Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
        assert!(text.contains("think"), "{text}");
        let body = json!({"model": NAME, "prompt": "x", "raw": true, "think": true});
        let (status, text) = call(&thinking, "POST", "/api/generate", Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
        // A template without thinking refuses it.
        let body = json!({"model": NAME, "messages": ask(), "think": true});
        let (status, text) = call(router(), "POST", "/api/chat", Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
        assert!(text.contains("cannot turn thinking on"), "{text}");
    });
}
