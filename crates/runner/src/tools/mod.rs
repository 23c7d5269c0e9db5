//! Tool calls (function calling) in the Gemma conventions: what a chat template's tool-call
//! syntax is, how a call the model wrote becomes `{name, arguments}`, how generated text splits
//! into content and calls as it streams, and the grammar that makes the model call a tool.
//!
//! Gemma models write a call as `call:NAME{key:value,...}` between a start and an end marker,
//! with strings between quote markers: Gemma 4 uses `<|tool_call>`, `<tool_call|>` and
//! `<|"|>` (its chat template renders declarations and calls so); FunctionGemma, the Gemma 3
//! 270M function-calling model, uses `<start_function_call>`, `<end_function_call>` and
//! `<escape>`. Keys are bare words; values are strings, numbers, `true`, `false`, `null`,
//! `{...}` objects and `[...]` arrays. The syntax of a model is read from its chat template (a
//! template that renders neither has no tool calling, and a request with tools is refused).

mod arguments;
mod grammar;
mod splitter;
mod syntax;

pub use arguments::{parse_call, parse_cut_call, ToolCall};
pub use grammar::{call_grammar, ToolChoice};
pub(crate) use splitter::held_back;
pub use splitter::{Split, ToolCallSplitter};
pub use syntax::ToolSyntax;
