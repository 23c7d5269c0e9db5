//! `mtp serve --model T.gguf --draft A.gguf`: the server over a Gemma 4 GGUF target and its
//! assistant GGUF (llama.cpp's converter, `tests/fixtures/gemma4_gguf`) reports both files and
//! answers a greedy request with llama.cpp's greedy continuation, drafting.

mod gemma4_gguf_support;
mod server_support;

use std::sync::Arc;

use axum::http::StatusCode;
use gemma4_gguf_support::{case_dir, runs};
use runner::loading::gguf::GgufFile;
use runner::server::{self, AppState, ServerConfig};
use runner::tokenizer::Tokenizer;
use runner::ModelPaths;
use serde_json::json;
use server_support::{call, json_of, runtime, worker_over, NAME};

#[test]
fn the_server_answers_with_llama_cpps_greedy_tokens_from_a_gguf_pair() {
    let dir = case_dir("e2b_like");
    let (target, assistant) = (dir.join("target-f32.gguf"), dir.join("assistant-f32.gguf"));
    let reference: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap())
            .unwrap();
    let prompt = reference["runs"][0]["text"].as_str().unwrap().to_string();
    let greedy = runs("e2b_like")[0].llama_greedy.clone();
    let tokenizer = Tokenizer::from_gguf(&GgufFile::open(&target).unwrap()).unwrap();
    assert!(
        !greedy.iter().any(|id| tokenizer.eos_ids().contains(id)),
        "the fixture's continuation must not stop at an end-of-generation token"
    );
    // The text the server streams for those ids (its own detokenizer: the fixture's random
    // byte tokens decode piece by piece, not as one invalid run).
    let mut detokenizer = tokenizer.detokenizer();
    let mut expected = String::new();
    for &id in &greedy {
        expected.extend(detokenizer.push(id).unwrap());
    }
    expected.extend(detokenizer.finish().unwrap());

    let paths = ModelPaths {
        target: target.clone(),
        drafter: Some(assistant.clone()),
        draft_centroids: None,
        tokenizer: None,
        chat_template: None,
    };
    let router = server::router(AppState::new(
        Arc::new(worker_over(paths, 4, 1)),
        ServerConfig::default(),
    ));
    runtime().block_on(async {
        let (status, body) = call(&router, "GET", "/api/tags", None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let tags = json_of(&body);
        let model = &tags["models"][0];
        assert_eq!(model["details"]["format"], "gguf", "{tags}");
        assert_eq!(model["details"]["family"], "gemma4", "{tags}");
        let both = std::fs::metadata(&target).unwrap().len()
            + std::fs::metadata(&assistant).unwrap().len();
        assert_eq!(
            model["size"].as_u64(),
            Some(both),
            "the target and the drafter"
        );

        let request = json!({
            "model": NAME, "prompt": prompt, "raw": true, "stream": false,
            "options": {"temperature": 0, "num_predict": greedy.len()},
        });
        let (status, body) = call(&router, "POST", "/api/generate", Some(request)).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let reply = json_of(&body);
        assert_eq!(reply["response"], expected.as_str(), "{reply}");
        assert_eq!(reply["eval_count"], greedy.len(), "{reply}");
        assert_eq!(reply["mtp"]["proposer"], "mtp", "{reply}");
        assert!(reply["mtp"]["drafted"].as_u64() > Some(0), "{reply}");
    });
}
