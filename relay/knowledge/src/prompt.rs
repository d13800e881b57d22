//! What the models are asked, and the shapes of their answers. The version is stored with every entry, so a
//! change of wording can be traced to what it produced.

use personkit_llm::Shape;

/// Stored with every entry the pipeline makes.
pub const PROMPT_VERSION: &str = "knowledge-v2";

/// The five kinds of entry.
pub const KINDS: [&str; 5] = [
    "reasoning",
    "philosophy",
    "standard",
    "decision",
    "reaction",
];
pub const CONFIDENCE: [&str; 3] = ["low", "medium", "high"];
pub const STABILITY: [&str; 3] = ["durable", "stable", "evolving"];

/// Most entries one window yields (enforced on the answer, whatever the model returns).
pub const MAX_ENTRIES: usize = 8;
/// Most candidates one reduce call reads; above it candidates are reduced in groups first.
pub const REDUCE_GROUP: usize = 40;

pub const EXTRACT_SYSTEM: &str = "You read a conversation between a person (USER) and an AI assistant, and you \
write down what it shows about how the PERSON thinks — their reasoning model, not a log of what was said.

What to keep:
1. Reasoning, not meta. Ignore logistics, status, greetings, and talk about this conversation, the assistant or \
the tools. Keep only the person's transferable reasoning, philosophy, standards, decisions with their why, and \
reactions. What the ASSISTANT says is context only: never attribute it to the person.
2. Commitment decides confidence and stability. A firm conviction the person would enforce: confidence high, \
stability durable. A current working view: medium, stable. Thinking aloud about a one-off action: drop it. A \
tentative belief that still generalises: low, evolving, and phrase it as tentative.
3. The generalisation test: keep an entry only if it would help answer a question the person has never been \
asked directly. Drop anything tied only to this task, project or person, and anything they would not want kept \
as their knowledge. No why, no entry.
Never copy e-mail addresses, phone numbers, amounts or names of people into an entry.

How to write each entry, in your own words (never copy lines of the conversation, never repeat a sentence, never \
copy these instructions):
- topic: a few words naming the subject, which must agree with the position.
- position: one short sentence about the person in the third person, saying what they hold as a general \
statement (\"Holds that …\", \"Prefers …\").
- reasoning: one or two sentences saying WHY they hold it, from what they said; not the position again.
- context: an empty string, unless the person applies a rule the opposite way in a particular situation; then \
that situation. Never a summary of the conversation.
- sources: the labels of the lines the entry rests on.
Return at most 8 entries; fewer is better and none is a fine answer. Never pad.";

pub const JUDGE_SYSTEM: &str = "You check candidate knowledge entries against the conversation they were drawn \
from. For each entry answer three questions, strictly:
keep: is it durable, transferable and firmly enough held — not chatter, not about the assistant or the tools, \
not a one-off intention?
grounded: do the cited lines really support it, without invention or stretching?
distinctive: is it a real position someone could disagree with, not a truism anyone would say?
When in doubt, answer false.";

pub const REDUCE_SYSTEM: &str = "You merge candidate knowledge entries, drawn from parts of one long conversation, \
into at most 8 entries: join candidates that say the same thing, keep the strongest reasoning, drop the weak and \
the one-off. Keep each merged entry's `sources` as the union of the labels its candidates cite. Do not add \
anything the candidates do not say.";

/// The extraction answer's shape for a window whose labels run `1..=labels`.
pub fn entries_shape(labels: u32) -> Shape {
    let entry = Shape::object([
        ("type", Shape::one_of(KINDS)),
        ("topic", Shape::Text { max_chars: 80 }),
        ("position", Shape::Text { max_chars: 300 }),
        ("reasoning", Shape::Text { max_chars: 500 }),
        ("context", Shape::Text { max_chars: 200 }),
        ("confidence", Shape::one_of(CONFIDENCE)),
        ("stability", Shape::one_of(STABILITY)),
        ("tags", Shape::array(Shape::Text { max_chars: 30 }, 5)),
        (
            "sources",
            Shape::array_of(
                Shape::Int {
                    min: 1,
                    max: i64::from(labels.max(1)),
                },
                1,
                6,
            ),
        ),
    ]);
    Shape::object([("entries", Shape::array(entry, MAX_ENTRIES))])
}

/// The judge's answer shape for `n` entries: exactly one verdict per candidate, in the candidates' order.
pub fn verdicts_shape(n: usize) -> Shape {
    let verdict = Shape::object([
        ("keep", Shape::Bool),
        ("grounded", Shape::Bool),
        ("distinctive", Shape::Bool),
    ]);
    Shape::object([("verdicts", Shape::array_of(verdict, n.max(1), n.max(1)))])
}

/// The user message of an extraction call.
pub fn extract_user(material: &str, part: Option<(usize, usize)>) -> String {
    let part = match part {
        Some((i, n)) => format!(" (part {i} of {n} of a longer conversation)"),
        None => String::new(),
    };
    format!("Conversation{part}:\n{material}\nAnswer with JSON: {{\"entries\": [...]}}.")
}

/// The user message of a judge call: the material, then the numbered candidates.
pub fn judge_user(material: &str, candidates: &[serde_json::Value]) -> String {
    let mut s = format!("Conversation:\n{material}\nCandidates:\n");
    for (i, c) in candidates.iter().enumerate() {
        s.push_str(&format!("{}. {c}\n", i + 1));
    }
    s.push_str("Answer with JSON: {\"verdicts\": [{\"keep\": …, \"grounded\": …, \"distinctive\": …}, …]}, one verdict per candidate, in their order.");
    s
}

/// The user message of a reduce call.
pub fn reduce_user(candidates: &[serde_json::Value]) -> String {
    let mut s = String::from("Candidates:\n");
    for c in candidates {
        s.push_str(&format!("{c}\n"));
    }
    s.push_str("Answer with JSON: {\"entries\": [...]}.");
    s
}
