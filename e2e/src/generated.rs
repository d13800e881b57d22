//! Generated fixture cases: the behaviours every surface must handle — a long virtualised thread, a streaming
//! answer that pauses and is re-rendered whole, edited and regenerated turns, secrets, single-page navigation, and
//! (where the surface has no hand-written case for it) formatting —
//! written once and run on each surface's own markup. The prototypes are the turns of the surface's hand-written
//! fixture (`e2e/fixtures/<surface>/<case>/page.html`, whose header says where its structure comes from): the
//! page is that fixture's page with its script replaced by `FX.generated` (e2e/fixtures/_lib/fixture.js), which
//! clones the user turn and an answer with new text. The registry file supplies the answer body selector, the
//! reasoning panels to leave out of the prototype and the message-key attributes to keep unique.

use std::path::Path;

use anyhow::{Context, Result, anyhow};
use serde_json::{Value, json};

use crate::fixtures::{self, Case, Conversation, Expected, ExpectedTurn};

/// The kinds of generated case, in the order they run.
pub const KINDS: [&str; 6] = [
    "long",
    "streaming",
    "edited",
    "secrets",
    "spa_navigation",
    "formatting",
];

/// The answer body of the generated formatting case: a table, KaTeX maths as KaTeX renders it (MathML with the
/// TeX annotation, plus the visual HTML hidden from screen readers), a code block with its language class, nested
/// lists, an image and a citation link, put inside the surface's own answer body element.
const FORMATTING_HTML: &str = concat!(
    r#"<p>Here is the summary of the team.</p>"#,
    r#"<table><thead><tr><th>Name</th><th>Role</th><th>Language</th></tr></thead>"#,
    r#"<tbody><tr><td>Alice</td><td>Developer</td><td>Python</td></tr>"#,
    r#"<tr><td>Bob</td><td>Designer</td><td>Figma</td></tr></tbody></table>"#,
    r#"<p>Einstein wrote <span class="katex"><span class="katex-mathml"><math xmlns="http://www.w3.org/1998/Math/MathML">"#,
    r#"<semantics><mrow><mi>E</mi><mo>=</mo><mi>m</mi><msup><mi>c</mi><mn>2</mn></msup></mrow>"#,
    r#"<annotation encoding="application/x-tex">E = mc^2</annotation></semantics></math></span>"#,
    r#"<span class="katex-html" aria-hidden="true"><span class="base"><span class="mord mathnormal">E</span>"#,
    r#"<span class="mrel">=</span><span class="mord mathnormal">m</span><span class="mord"><span class="mord mathnormal">c</span>"#,
    r#"<span class="msupsub"><span class="mord mtight">2</span></span></span></span></span></span> and also</p>"#,
    r#"<p><span class="katex-display"><span class="katex"><span class="katex-mathml">"#,
    r#"<math xmlns="http://www.w3.org/1998/Math/MathML" display="block"><semantics><mrow><msubsup><mo>∫</mo><mn>0</mn>"#,
    r#"<mi mathvariant="normal">∞</mi></msubsup><msup><mi>e</mi><mrow><mo>−</mo><mi>x</mi></mrow></msup>"#,
    r#"<mi>d</mi><mi>x</mi><mo>=</mo><mn>1</mn></mrow>"#,
    r#"<annotation encoding="application/x-tex">\int_0^\infty e^{-x}\,dx = 1</annotation></semantics></math></span>"#,
    r#"<span class="katex-html" aria-hidden="true"><span class="base"><span class="mop op-symbol large-op">∫</span>"#,
    r#"<span class="mord mathnormal">e</span><span class="mord mathnormal">d</span><span class="mord mathnormal">x</span>"#,
    r#"<span class="mrel">=</span><span class="mord">1</span></span></span></span></span></p>"#,
    "<pre><code class=\"language-python\">def area(r):\n    return 3.14159 * r ** 2</code></pre>",
    r#"<ul><li>Fruits<ul><li>apple</li><li>pear</li></ul></li><li>Vegetables</li></ul>"#,
    r#"<p><img src="/__e2e/chart.png" alt="A bar chart of sales" width="400" height="200"></p>"#,
    r#"<p>Source: <a href="https://example.com/report" target="_blank" rel="noopener noreferrer">the report</a></p>"#,
);

/// What the core makes of [`FORMATTING_HTML`].
const FORMATTING_TEXT: &str = concat!(
    "Here is the summary of the team.\n\n",
    "| Name | Role | Language |\n| --- | --- | --- |\n| Alice | Developer | Python |\n| Bob | Designer | Figma |\n\n",
    "Einstein wrote $E = mc^2$ and also\n\n",
    r"$$\int_0^\infty e^{-x}\,dx = 1$$",
    "\n\n```python\ndef area(r):\n    return 3.14159 * r ** 2\n```\n\n",
    "- Fruits\n  - apple\n  - pear\n- Vegetables\n\n",
    "[image: A bar chart of sales]\n\n",
    "Source: [the report](https://example.com/report)",
);

/// Surfaces whose conversation is the day (Pi's one running thread at `/talk`): every case lands in the same
/// conversation, so each needs a corpus of its own, and there is no other conversation to navigate to.
pub fn one_conversation_per_day(surface: &str) -> bool {
    surface == "pi"
}

/// What to generate for one surface.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Turns in the long case (a window of 20 stays in the DOM).
    pub long_turns: usize,
}

fn t(role: &str, text: String) -> ExpectedTurn {
    ExpectedTurn {
        role: role.to_owned(),
        text,
        exact: false,
    }
}

fn qa(tag: &str, from: usize, pairs: usize) -> Vec<ExpectedTurn> {
    (from..from + pairs)
        .flat_map(|i| {
            [
                t(
                    "user",
                    format!("Question {i} of {tag}: what is {i} plus {i}?"),
                ),
                t(
                    "assistant",
                    format!("Answer {i} of {tag}: {i} plus {i} is {}.", 2 * i),
                ),
            ]
        })
        .collect()
}

fn plain(turns: &[ExpectedTurn]) -> Value {
    Value::Array(
        turns
            .iter()
            .map(|x| json!({"role": x.role, "text": x.text}))
            .collect(),
    )
}

/// The generated cases of `surface` (a directory name under e2e/fixtures), written under `out`.
pub fn cases(surface: &str, out: &Path, plan: Plan) -> Result<Vec<Case>> {
    let source = fixtures::cases(surface)?
        .into_iter()
        .next()
        .ok_or_else(|| anyhow!("{surface} has no fixture case to take prototypes from"))?;
    let page = std::fs::read_to_string(source.page())?;
    let start = page
        .find("const turns = [")
        .ok_or_else(|| anyhow!("{}: no `const turns = [...]` in the page", source.name))?;
    let end = start
        + page[start..]
            .find("];\n")
            .ok_or_else(|| anyhow!("{}: unterminated turns", source.name))?
        + 3;
    let turns_js = &page[start..end];
    let proto: Vec<String> =
        serde_json::from_str(&turns_js["const turns = ".len()..turns_js.len() - 2])
            .with_context(|| format!("{}: turns are not a JSON array of strings", source.name))?;
    let script_end = page[end..]
        .find("})();")
        .ok_or_else(|| anyhow!("{}: no end of the page script", source.name))?
        + end;
    let expected_turns = &source.expected.conversations[0].turns;
    let user_text = expected_turns
        .iter()
        .find(|x| x.role == "user")
        .map(|x| x.text.clone())
        .ok_or_else(|| anyhow!("{}: no user turn", source.name))?;
    let registry: Value = serde_json::from_str(&std::fs::read_to_string(
        crate::workspace_root().join(format!("shared/surfaces/{surface}.json")),
    )?)?;
    let body_selector = registry["text_selectors"]["assistant"]
        .get(0)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let mut remove: Vec<Value> = registry["reasoning_selectors"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    remove.extend(
        registry["artifact_selectors"]
            .as_array()
            .cloned()
            .unwrap_or_default(),
    );
    let keys: Vec<Value> = registry["message_key"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter_map(|k| {
            let sel = k["selector"].as_str()?;
            Some(json!({"selector": sel, "attribute": k["attribute"]}))
        })
        .collect();
    let assistant_index = proto.len() - 1;
    let id = source.expected.conversations[0].id.clone();
    let per_day = one_conversation_per_day(surface);
    let conv_id = |n: usize| -> String {
        if per_day {
            return id.clone();
        }
        let keep = id.len().saturating_sub(4);
        format!("{}{n:04}", &id[..keep])
    };
    let path_of = |cid: &str| source.expected.path.replace(&id, cid);
    // A battle surface (LMArena) labels each of the answers side by side `[Assistant <side>]`: the generated
    // assistant turns are shown on every side, each followed by its side's name.
    let sides: Vec<String> = expected_turns
        .iter()
        .filter_map(|x| {
            let side = x.text.strip_prefix("[Assistant ")?.split(']').next()?;
            (x.role == "assistant").then(|| side.to_owned())
        })
        .collect();
    let sides = if sides.len() >= 2 { sides } else { Vec::new() };
    let battle = |turns: Vec<ExpectedTurn>| -> Vec<ExpectedTurn> {
        if sides.is_empty() {
            return turns;
        }
        turns
            .into_iter()
            .flat_map(|x| {
                if x.role != "assistant" {
                    return vec![x];
                }
                sides
                    .iter()
                    .map(|side| ExpectedTurn {
                        role: x.role.clone(),
                        text: format!("[Assistant {side}]\n\n{}\n\n({side})", x.text),
                        exact: x.exact,
                    })
                    .collect()
            })
            .collect()
    };

    // A surface with a hand-written formatting case (the site's own markup for each construct) needs no generated one.
    let has_formatting = fixtures::cases(surface)?
        .iter()
        .any(|c| c.name.ends_with("/formatting"));
    let mut out_cases = Vec::new();
    for (k, kind) in KINDS.iter().enumerate() {
        if (*kind == "formatting" && has_formatting) || (*kind == "spa_navigation" && per_day) {
            continue;
        }
        let tag = format!("g{k}");
        let a = conv_id(10 * k + 1);
        let mut conversations = Vec::new();
        let mut must_not_contain: Vec<String> = Vec::new();
        let mut extra_paths = Vec::new();
        let (cfg, script_ms) = match *kind {
            "long" => {
                let turns = qa(kind, 1, plan.long_turns / 2);
                let steps = turns.len().saturating_sub(20).div_ceil(10) as u64 + 1;
                let cfg = json!({"kind": "long", "turns": plain(&turns), "window": 20, "step": 10, "hold": 900});
                conversations.push(Conversation {
                    id: a.clone(),
                    turns,
                    superseded: vec![],
                });
                (cfg, steps * 900 + 2_000)
            }
            "streaming" => {
                let before = qa(kind, 1, 1);
                let question = "Question 2 of streaming: explain the answer at length.".to_owned();
                let answer = "Answer 2 of streaming: the text of this answer grows a few characters at a time, pauses for well over the quiet period in the middle, and is re-rendered from scratch every few steps, as the sites' frameworks do.".to_owned();
                let mut turns = before.clone();
                turns.push(t("user", question.clone()));
                turns.push(t("assistant", answer.clone()));
                let cfg = json!({"kind": "streaming", "turns": plain(&before), "hold": 1500,
                    "question": question, "answer": answer});
                conversations.push(Conversation {
                    id: a.clone(),
                    turns,
                    superseded: vec![],
                });
                (cfg, 12_000)
            }
            "edited" => {
                let first = qa(kind, 1, 2);
                let mut now = first.clone();
                now[2] = t(
                    "user",
                    "Question 2 of edited, edited: what is 2 plus 5?".into(),
                );
                now[3] = t(
                    "assistant",
                    "Answer 2 of edited, regenerated: 2 plus 5 is 7.".into(),
                );
                let cfg = json!({"kind": "edited", "turns": plain(&first), "hold": 2500,
                    "edits": [[2, now[2].text], [3, now[3].text]]});
                conversations.push(Conversation {
                    id: a.clone(),
                    turns: now,
                    superseded: vec![first[2].clone(), first[3].clone()],
                });
                (cfg, 5_000)
            }
            "formatting" => {
                let question = "Summarise the team table, the maths and the code, please.";
                let rendered = json!([
                    {"role": "user", "text": question},
                    {"role": "assistant", "text": "", "html": FORMATTING_HTML},
                ]);
                must_not_contain = vec!["katex".into(), "mjx".into(), "E=mc2".into()];
                conversations.push(Conversation {
                    id: a.clone(),
                    turns: [("user", question), ("assistant", FORMATTING_TEXT)]
                        .into_iter()
                        .map(|(role, text)| ExpectedTurn {
                            role: role.to_owned(),
                            text: text.to_owned(),
                            exact: true,
                        })
                        .collect(),
                    superseded: vec![],
                });
                (json!({"kind": "plain", "turns": rendered}), 2_000)
            }
            "secrets" => {
                let raw = vec![
                    t("user", "Is my key sk-proj-AbCdEfGhIjKlMnOpQrStUv123 safe to paste here?".into()),
                    t("assistant", "No: rotate sk-proj-AbCdEfGhIjKlMnOpQrStUv123 and the Slack token xoxb-1234567890-abcdefghij now.".into()),
                ];
                must_not_contain = vec![
                    "sk-proj-AbCdEfGhIjKlMnOpQrStUv123".into(),
                    "xoxb-1234567890-abcdefghij".into(),
                    "AbCdEfGhIjKlMnOpQrStUv123".into(),
                ];
                let cfg = json!({"kind": "plain", "turns": plain(&raw)});
                conversations.push(Conversation {
                    id: a.clone(),
                    turns: vec![
                        t("user", "Is my key [REDACTED:openai_key] safe to paste here?".into()),
                        t("assistant", "No: rotate [REDACTED:openai_key] and the Slack token [REDACTED:slack_token] now.".into()),
                    ],
                    superseded: vec![],
                });
                (cfg, 2_000)
            }
            _ => {
                let b = conv_id(10 * k + 2);
                let first = qa("spa-a", 1, 1);
                let second = qa("spa-b", 1, 1);
                let next_path = path_of(&b);
                extra_paths.push(next_path.split('?').next().unwrap_or("/").to_owned());
                let cfg = json!({"kind": "spa", "turns": plain(&first), "hold": 2500,
                    "next_path": next_path, "next_turns": plain(&second)});
                conversations.push(Conversation {
                    id: a.clone(),
                    turns: first,
                    superseded: vec![],
                });
                conversations.push(Conversation {
                    id: b,
                    turns: second,
                    superseded: vec![],
                });
                (cfg, 5_000)
            }
        };
        let conversations: Vec<Conversation> = conversations
            .into_iter()
            .map(|c| Conversation {
                turns: battle(c.turns),
                superseded: battle(c.superseded),
                ..c
            })
            .collect();
        let mut cfg = cfg;
        if !sides.is_empty() {
            cfg["sides"] = json!(sides);
        }
        cfg["container"] = json!("#thread");
        cfg["user_index"] = json!(0);
        cfg["assistant_index"] = json!(assistant_index);
        cfg["user_text"] = json!(user_text);
        cfg["body_selector"] = json!(body_selector);
        cfg["remove"] = Value::Array(remove.clone());
        cfg["keys"] = Value::Array(keys.clone());
        cfg["tag"] = json!(tag);
        // The site's own turn numbers (attribute ordinals) are rewritten per turn by the fixture script.
        if let Some(o) = registry
            .get("ordinal")
            .filter(|o| o["source"].as_str().unwrap_or("attribute") == "attribute")
        {
            cfg["ordinal"] = json!({"selector": o["selector"], "attribute": o["attribute"], "offset": o["offset"].as_i64().unwrap_or(0)});
        }
        let script = format!("{turns_js}  await FX.generated(turns, {cfg});\n  FX.done();\n");
        let html = format!("{}{}{}", &page[..start], script, &page[script_end..]);
        let dir = out.join(surface).join(kind);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("page.html"), html)?;
        out_cases.push(Case {
            name: format!("{surface}/generated-{kind}"),
            dir,
            expected: Expected {
                surface: source.expected.surface.clone(),
                host: source.expected.host.clone(),
                path: path_of(&a),
                extra_paths,
                description: format!("generated {kind} case on the markup of {}", source.name),
                conversations,
                must_not_contain,
                script_ms,
                known_failure: false,
                known_failure_reason: None,
            },
        });
    }
    Ok(out_cases)
}
