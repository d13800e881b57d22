//! What a surface is: the AI product a thread was held in and who makes it, and the makers of model families. A
//! small table of facts about products; a surface not in it still names a tool (its own name), with no maker.

/// A product a surface stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Product {
    pub name: String,
    pub maker: Option<&'static str>,
}

/// Surface names (the part after `browser-ext:`, `harvest:` or `import:`) and their products.
const PRODUCTS: &[(&str, &str, Option<&str>)] = &[
    // Chat sites (shared/surfaces/*.json).
    ("chatgpt", "ChatGPT", Some("OpenAI")),
    ("claude", "Claude", Some("Anthropic")),
    ("claude-project", "Claude", Some("Anthropic")),
    ("gemini", "Gemini", Some("Google")),
    ("copilot", "Microsoft Copilot", Some("Microsoft")),
    ("deepseek", "DeepSeek", Some("DeepSeek")),
    ("grok", "Grok", Some("xAI")),
    ("mistral", "Le Chat", Some("Mistral AI")),
    ("perplexity", "Perplexity", Some("Perplexity")),
    ("meta", "Meta AI", Some("Meta")),
    ("qwen", "Qwen Chat", Some("Alibaba")),
    ("kimi", "Kimi", Some("Moonshot AI")),
    ("poe", "Poe", Some("Quora")),
    ("pi", "Pi", Some("Inflection AI")),
    ("huggingchat", "HuggingChat", Some("Hugging Face")),
    ("lmarena", "LMArena", None),
    ("chatglm", "ChatGLM", Some("Zhipu AI")),
    ("doubao", "Doubao", Some("ByteDance")),
    ("hailuo", "Hailuo AI", Some("MiniMax")),
    ("wenxin", "ERNIE Bot", Some("Baidu")),
    ("yi", "Yi", Some("01.AI")),
    ("sensechat", "SenseChat", Some("SenseTime")),
    // Agent tools (relay/import/src/harvest).
    ("claude-code", "Claude Code", Some("Anthropic")),
    ("codex", "Codex CLI", Some("OpenAI")),
    ("gemini-cli", "Gemini CLI", Some("Google")),
    ("aider", "Aider", None),
    ("continue", "Continue", None),
    ("cline", "Cline", None),
    ("roo-code", "Roo Code", None),
    ("qwen-code", "Qwen Code", Some("Alibaba")),
    ("grok-build", "Grok Build", Some("xAI")),
    ("kiro", "Kiro", Some("Amazon")),
    ("amp", "Amp", Some("Sourcegraph")),
    ("cursor", "Cursor", Some("Anysphere")),
    ("cursor-agent", "Cursor", Some("Anysphere")),
    ("copilot-chat", "GitHub Copilot", Some("GitHub")),
    ("opencode", "OpenCode", None),
    ("goose", "Goose", Some("Block")),
];

/// Whether a surface is a harvested agent session (its threads have a project).
pub fn is_harvest(surface: &str) -> bool {
    surface.starts_with("harvest:")
}

/// The bare name of a surface, without its `browser-ext:`, `harvest:` or `import:` prefix.
pub fn bare(surface: &str) -> &str {
    surface.split_once(':').map_or(surface, |(_, rest)| rest)
}

/// The product of a surface: the table's, else the surface's own bare name with no maker; `None` for an empty
/// name.
pub fn product(surface: &str) -> Option<Product> {
    let name = bare(surface).trim();
    if name.is_empty() {
        return None;
    }
    Some(match PRODUCTS.iter().find(|(s, _, _)| *s == name) {
        Some((_, n, m)) => Product {
            name: (*n).to_owned(),
            maker: *m,
        },
        None => Product {
            name: name.to_owned(),
            maker: None,
        },
    })
}

/// Model families by the start of a model id, and who makes them.
const MODEL_MAKERS: &[(&str, &str)] = &[
    ("gpt-", "OpenAI"),
    ("o1-", "OpenAI"),
    ("o3-", "OpenAI"),
    ("o4-", "OpenAI"),
    ("claude-", "Anthropic"),
    ("gemini-", "Google"),
    ("gemma-", "Google"),
    ("llama-", "Meta"),
    ("mistral-", "Mistral AI"),
    ("mixtral-", "Mistral AI"),
    ("codestral-", "Mistral AI"),
    ("grok-", "xAI"),
    ("deepseek-", "DeepSeek"),
    ("qwen", "Alibaba"),
    ("kimi-", "Moonshot AI"),
    ("glm-", "Zhipu AI"),
];

/// The maker of a model id (lower case), by its family.
pub fn model_maker(model: &str) -> Option<&'static str> {
    MODEL_MAKERS
        .iter()
        .find(|(p, _)| model.starts_with(p))
        .map(|(_, m)| *m)
}

/// What follows a model family's prefix in `model` (lower case), when it starts with one.
pub fn model_prefix_rest(model: &str) -> Option<&str> {
    MODEL_MAKERS.iter().find_map(|(p, _)| model.strip_prefix(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn surfaces_name_their_product_and_maker() {
        assert_eq!(
            product("harvest:claude-code"),
            Some(Product {
                name: "Claude Code".into(),
                maker: Some("Anthropic")
            })
        );
        assert_eq!(
            product("browser-ext:chatgpt").map(|p| p.name).as_deref(),
            Some("ChatGPT")
        );
        assert_eq!(
            product("browser-ext:chatgpt").and_then(|p| p.maker),
            Some("OpenAI")
        );
        assert_eq!(
            product("harvest:newtool").map(|p| p.name).as_deref(),
            Some("newtool")
        );
        assert_eq!(product("harvest:newtool").and_then(|p| p.maker), None);
        assert_eq!(product("harvest:"), None);
        assert!(is_harvest("harvest:codex") && !is_harvest("browser-ext:claude"));
        assert_eq!(model_maker("claude-sonnet-4-5"), Some("Anthropic"));
        assert_eq!(model_maker("gpt-4o"), Some("OpenAI"));
        assert_eq!(model_maker("unknown-1"), None);
    }
}
