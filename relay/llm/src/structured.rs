//! One structured call: ask, find the JSON, check it against the shape, and ask once more if it is unusable.
//! A transient failure (a dropped connection, a timeout) is the backend's to retry; this retries only an answer
//! that came back in the wrong form, once, telling the model what was wrong.

use serde_json::Value;

use crate::json::find_json;
use crate::{ChatModel, LlmError, Request, Usage};

/// A checked answer.
#[derive(Debug, Clone)]
pub struct Structured {
    pub value: Value,
    /// Tokens used over every call this took.
    pub usage: Usage,
    /// Calls made (1, or 2 after a retry).
    pub calls: u32,
}

/// Asks `model` for `req` (which must carry a shape) and returns an answer that passed `shape.check`, or
/// [`LlmError::Unparseable`] after the second unusable answer. Other errors are returned as they come.
pub fn structured(model: &dyn ChatModel, req: &Request) -> Result<Structured, LlmError> {
    let Some(shape) = &req.shape else {
        return Err(LlmError::Config("a structured call needs a shape".into()));
    };
    structured_with(model, req, &|v| shape.check(v))
}

/// [`structured`] with the caller's own check of the answer in place of the shape's (a caller that validates
/// each item itself accepts an answer whose items it will drop one by one). The shape is still what is asked for.
pub fn structured_with(
    model: &dyn ChatModel,
    req: &Request,
    check: &dyn Fn(&Value) -> Result<(), String>,
) -> Result<Structured, LlmError> {
    let mut usage = Usage::default();
    let mut problem = String::new();
    for attempt in 1..=2u32 {
        let asked = if attempt == 1 {
            req.clone()
        } else {
            Request {
                user: format!(
                    "{}\n\nYour previous answer could not be used ({problem}). Answer again with only the JSON, nothing else.",
                    req.user
                ),
                ..req.clone()
            }
        };
        let done = model.complete(&asked)?;
        usage += done.usage;
        match find_json(&done.text) {
            None => problem = "no JSON found".into(),
            Some(value) => match check(&value) {
                Ok(()) => {
                    return Ok(Structured {
                        value,
                        usage,
                        calls: attempt,
                    });
                }
                Err(e) => problem = e,
            },
        }
    }
    Err(LlmError::Unparseable(problem))
}
