//! Each embedder path: `local` with the real all-MiniLM-L6-v2 from `.venv` (installed by scripts/setup), and
//! `openai` / `vertex` against a small loopback HTTP server that speaks their protocols. The server is a
//! stand-in: the real cloud APIs cannot be reached from the test machine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use personkit_testkit as search_support;

use personkit_embed::{self as embed, EmbedError, EmbedderConfig, EmbedderKind};
use search_support::{StandIn, fake_vector, model_dir};
use serde_json::json;

fn cos(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[test]
fn local_model_embeds_meaningfully_and_batches_consistently() {
    let mut cfg = EmbedderConfig::of_kind(EmbedderKind::Local);
    cfg.model_dir = Some(model_dir());
    let e = embed::build(&cfg).unwrap().expect("local embedder");
    assert_eq!(e.kind(), "local");
    assert_eq!(e.dim(), 384);
    assert!(e.model_key().starts_with("local:"), "{}", e.model_key());
    let texts = [
        "A cat is sitting on the mat.",
        "A kitten rests on a rug.",
        "Quarterly revenue grew by five percent in the third quarter, driven by cloud subscriptions.",
    ];
    let v = e.embed_documents(&texts).unwrap();
    assert_eq!(v.len(), 3);
    for x in &v {
        assert_eq!(x.len(), 384);
        let n: f32 = x.iter().map(|a| a * a).sum::<f32>().sqrt();
        assert!((n - 1.0).abs() < 1e-4, "unit length, got {n}");
    }
    let near = cos(&v[0], &v[1]);
    let far = cos(&v[0], &v[2]);
    assert!(
        near > 0.5 && near > far + 0.3,
        "cat~kitten {near} vs cat~revenue {far}"
    );
    // Padding must not change a text's vector: alone vs. in a batch with a much longer text.
    let alone = e.embed_documents(&texts[..1]).unwrap();
    assert!(
        cos(&alone[0], &v[0]) > 0.9999,
        "batched and single vectors differ"
    );
    // Query path = document path for this symmetric model.
    let q = e.embed_query(texts[0]).unwrap();
    assert!(cos(&q, &v[0]) > 0.9999);
}

/// The packed encoder (the default engine) and candle's `BertModel` (the reference) give the same vectors, for
/// texts of every length up to the truncation limit, alone and in mixed batches.
#[test]
fn packed_engine_matches_the_candle_reference() {
    use embed::Embedder;
    use embed::local::{Engine, LocalEmbedder};
    let packed = LocalEmbedder::load(&model_dir()).unwrap();
    assert_eq!(
        packed.engine(),
        Engine::Packed,
        "MiniLM runs on the packed engine"
    );
    let reference = LocalEmbedder::load_with(&model_dir(), Engine::Candle).unwrap();
    assert_eq!(
        packed.model_key(),
        reference.model_key(),
        "same vectors, same cache key"
    );
    let long =
        "The migration moved every table to the new schema, one shard at a time. ".repeat(40);
    let texts: Vec<&str> = vec![
        "",
        "ok",
        "A cat is sitting on the mat.",
        "Naïve café owners in Zürich paid €1.234,56 — 日本語のテキストも少し。",
        "fn main() { println!(\"{}\", 1 + 2); } // code, symbols: <>&|^~",
        &long,
        "What did I decide about the Postgres migration last month?",
    ];
    let a = packed.embed_documents(&texts).unwrap();
    let b = reference.embed_documents(&texts).unwrap();
    for ((t, x), y) in texts.iter().zip(&a).zip(&b) {
        let c = cos(x, y);
        assert!(c > 0.9999, "cosine {c} for {:?}", &t[..t.len().min(40)]);
    }
    // A text's vector does not depend on what it is batched with.
    let alone = packed.embed_documents(&texts[2..3]).unwrap();
    assert!(cos(&alone[0], &a[2]) > 0.99999);
}

#[test]
fn local_model_dir_errors_say_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = EmbedderConfig::of_kind(EmbedderKind::Local);
    cfg.model_dir = Some(dir.path().to_path_buf());
    let err = embed::build(&cfg).unwrap_err();
    assert!(matches!(err, EmbedError::Model { .. }), "{err:?}");
    assert!(err.to_string().contains("model.safetensors"), "{err}");
    assert!(err.hint().contains("model fetch"), "{}", err.hint());
}

#[test]
fn openai_compatible_endpoint_stand_in() {
    // Stand-in for an OpenAI-compatible /v1/embeddings server (OpenAI, Ollama, LM Studio).
    let server = StandIn::start(|path, body| {
        if path != "/v1/embeddings" {
            return (404, json!({"error": {"message": "not found"}}));
        }
        let inputs = body["input"].as_array().cloned().unwrap_or_default();
        // Answer out of order, as the protocol allows; the client must sort by index.
        let data: Vec<_> = inputs
            .iter()
            .enumerate()
            .rev()
            .map(|(i, t)| json!({"object": "embedding", "index": i, "embedding": fake_vector(t.as_str().unwrap(), 768)}))
            .collect();
        (
            200,
            json!({"object": "list", "data": data, "model": body["model"]}),
        )
    });
    let mut cfg = EmbedderConfig::of_kind(EmbedderKind::Openai);
    cfg.base_url = Some(server.base.clone());
    cfg.model = Some("nomic-embed-text".into());
    cfg.dim = Some(768);
    cfg.api_key = Some("sk-test-key".into());
    let e = embed::build(&cfg).unwrap().expect("openai embedder");
    assert!(
        !format!("{e:?}").contains("sk-test-key"),
        "Debug must redact the key"
    );
    assert_eq!(e.model_id(), "openai:nomic-embed-text");
    let v = e.embed_documents(&["alpha", "beta", "gamma"]).unwrap();
    assert_eq!(v.len(), 3);
    let mut want = fake_vector("beta", 768);
    embed::l2_normalize(&mut want);
    assert!(
        cos(&v[1], &want) > 0.9999,
        "vectors must come back in input order"
    );
    let seen = server.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].method, "POST");
    assert_eq!(seen[0].authorization.as_deref(), Some("Bearer sk-test-key"));
    assert_eq!(seen[0].body["model"], "nomic-embed-text");
    assert_eq!(seen[0].body["input"], json!(["alpha", "beta", "gamma"]));
}

#[test]
fn openai_wrong_dimension_and_http_errors_are_clear() {
    let server = StandIn::start(|_, body| {
        let n = body["input"].as_array().map_or(0, Vec::len);
        if body["model"] == "broken" {
            return (500, json!({"error": {"message": "model crashed"}}));
        }
        let data: Vec<_> = (0..n)
            .map(|i| json!({"index": i, "embedding": vec![0.1f32; 512]}))
            .collect();
        (200, json!({"data": data}))
    });
    let mut cfg = EmbedderConfig::of_kind(EmbedderKind::Openai);
    cfg.base_url = Some(format!("{}/v1", server.base));
    cfg.model = Some("m".into());
    cfg.dim = Some(384);
    let e = embed::build(&cfg).unwrap().unwrap();
    let err = e.embed_documents(&["x"]).unwrap_err();
    assert!(
        matches!(
            err,
            EmbedError::WrongDim {
                want: 384,
                got: 512
            }
        ),
        "{err:?}"
    );
    cfg.model = Some("broken".into());
    let err = embed::build(&cfg)
        .unwrap()
        .unwrap()
        .embed_documents(&["x"])
        .unwrap_err();
    assert!(
        err.to_string().contains("HTTP 500") && err.to_string().contains("model crashed"),
        "{err}"
    );
    // A configured dimension without a vector table is refused up front.
    cfg.dim = Some(512);
    let err = embed::build(&cfg).unwrap_err();
    assert!(matches!(err, EmbedError::UnsupportedDim(512)), "{err:?}");
    assert!(err.to_string().contains("384 and 768"), "{err}");
}

#[test]
fn vertex_predict_stand_in() {
    // Stand-in for Vertex AI's text-embedding-005 :predict endpoint.
    let server = StandIn::start(|path, body| {
        if !path.ends_with("/publishers/google/models/text-embedding-005:predict") {
            return (
                404,
                json!({"error": {"message": format!("no route {path}")}}),
            );
        }
        let preds: Vec<_> = body["instances"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| {
                json!({"embeddings": {"values": fake_vector(i["content"].as_str().unwrap(), 768),
                        "statistics": {"token_count": 3, "truncated": false}}})
            })
            .collect();
        (200, json!({"predictions": preds}))
    });
    let mut cfg = EmbedderConfig::of_kind(EmbedderKind::Vertex);
    cfg.project = Some("my-proj".into());
    cfg.location = Some("europe-west4".into());
    cfg.token = Some("ya29.secret-token".into());
    cfg.endpoint = Some(server.base.clone());
    let e = embed::build(&cfg).unwrap().expect("vertex embedder");
    assert_eq!(e.dim(), 768);
    assert!(!format!("{e:?}").contains("secret"));
    let v = e.embed_documents(&["one", "two"]).unwrap();
    assert_eq!(v.len(), 2);
    let q = e.embed_query("question").unwrap();
    assert_eq!(q.len(), 768);
    let seen = server.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        seen[0].path,
        "/v1/projects/my-proj/locations/europe-west4/publishers/google/models/text-embedding-005:predict"
    );
    assert_eq!(
        seen[0].authorization.as_deref(),
        Some("Bearer ya29.secret-token")
    );
    assert_eq!(
        seen[0].body["instances"][1]["task_type"],
        "RETRIEVAL_DOCUMENT"
    );
    assert_eq!(seen[1].body["instances"][0]["task_type"], "RETRIEVAL_QUERY");
    // Missing configuration is reported with the variable to set.
    let err = embed::build(&EmbedderConfig::of_kind(EmbedderKind::Vertex)).unwrap_err();
    assert!(
        err.to_string().contains("PERSONKIT_VERTEX_PROJECT"),
        "{err}"
    );
}
