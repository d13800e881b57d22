//! The answer shapes the pipeline asks models for: a small language that maps onto JSON Schema for endpoints and
//! drives the in-process model's constrained decoding, and the check every answer passes before anyone uses it.

use serde_json::{Value, json};

/// The shape of a JSON answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    /// An object with exactly these fields, in this order, all required.
    Object(Vec<(String, Shape)>),
    /// A list of `min..=max` items.
    Array {
        items: Box<Shape>,
        min: usize,
        max: usize,
    },
    /// A string of at most `max_chars` characters.
    Text { max_chars: usize },
    /// One of these strings.
    OneOf(Vec<String>),
    /// `true` or `false`.
    Bool,
    /// A whole number in `min..=max`.
    Int { min: i64, max: i64 },
}

impl Shape {
    /// An object shape from `(name, shape)` pairs.
    pub fn object<const N: usize>(fields: [(&str, Shape); N]) -> Shape {
        Shape::Object(fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
    }

    /// A list of `items`, at most `max` long.
    pub fn array(items: Shape, max: usize) -> Shape {
        Shape::Array {
            items: Box::new(items),
            min: 0,
            max,
        }
    }

    /// A list of `items`, `min` to `max` long.
    pub fn array_of(items: Shape, min: usize, max: usize) -> Shape {
        Shape::Array {
            items: Box::new(items),
            min: min.min(max),
            max,
        }
    }

    /// One of `options`.
    pub fn one_of<const N: usize>(options: [&str; N]) -> Shape {
        Shape::OneOf(options.into_iter().map(str::to_owned).collect())
    }

    /// The JSON Schema an OpenAI-compatible server is given (`strict` mode's subset: every property required, no
    /// additional properties).
    pub fn json_schema(&self) -> Value {
        match self {
            Shape::Object(fields) => {
                let props: serde_json::Map<String, Value> = fields
                    .iter()
                    .map(|(k, v)| (k.clone(), v.json_schema()))
                    .collect();
                let required: Vec<&str> = fields.iter().map(|(k, _)| k.as_str()).collect();
                json!({"type": "object", "properties": props, "required": required, "additionalProperties": false})
            }
            Shape::Array { items, min, max } => {
                json!({"type": "array", "items": items.json_schema(), "minItems": min, "maxItems": max})
            }
            Shape::Text { max_chars } => json!({"type": "string", "maxLength": max_chars}),
            Shape::OneOf(options) => json!({"type": "string", "enum": options}),
            Shape::Bool => json!({"type": "boolean"}),
            Shape::Int { min, max } => json!({"type": "integer", "minimum": min, "maximum": max}),
        }
    }

    /// Whether `value` has this shape; the error names the first place it does not (`$.entries[2].topic: …`).
    /// Extra object fields are allowed (and ignored by readers); missing ones are not. Overlong text and lists are
    /// errors, not truncated: a caller decides what to do with an answer that ignored its bounds.
    pub fn check(&self, value: &Value) -> Result<(), String> {
        self.check_at(value, "$")
    }

    fn check_at(&self, value: &Value, at: &str) -> Result<(), String> {
        match (self, value) {
            (Shape::Object(fields), Value::Object(map)) => {
                for (k, shape) in fields {
                    let here = format!("{at}.{k}");
                    match map.get(k) {
                        Some(v) => shape.check_at(v, &here)?,
                        None => return Err(format!("{here}: missing")),
                    }
                }
                Ok(())
            }
            (Shape::Array { items, min, max }, Value::Array(list)) => {
                if list.len() > *max {
                    return Err(format!("{at}: {} items, at most {max}", list.len()));
                }
                if list.len() < *min {
                    return Err(format!("{at}: {} items, at least {min}", list.len()));
                }
                for (i, v) in list.iter().enumerate() {
                    items.check_at(v, &format!("{at}[{i}]"))?;
                }
                Ok(())
            }
            (Shape::Text { max_chars }, Value::String(s)) => {
                let n = s.chars().count();
                if n > *max_chars {
                    Err(format!("{at}: {n} characters, at most {max_chars}"))
                } else {
                    Ok(())
                }
            }
            (Shape::OneOf(options), Value::String(s)) => {
                if options.iter().any(|o| o == s) {
                    Ok(())
                } else {
                    Err(format!("{at}: {s:?} is not one of {options:?}"))
                }
            }
            (Shape::Bool, Value::Bool(_)) => Ok(()),
            (Shape::Int { min, max }, Value::Number(n)) => match n.as_i64() {
                Some(i) if (*min..=*max).contains(&i) => Ok(()),
                _ => Err(format!("{at}: {n} is not a whole number in {min}..={max}")),
            },
            (shape, v) => Err(format!(
                "{at}: expected {}, got {}",
                shape.kind(),
                kind_of(v)
            )),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Shape::Object(_) => "an object",
            Shape::Array { .. } => "a list",
            Shape::Text { .. } => "a string",
            Shape::OneOf(_) => "one of the listed strings",
            Shape::Bool => "true or false",
            Shape::Int { .. } => "a whole number",
        }
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn entry() -> Shape {
        Shape::object([
            ("type", Shape::one_of(["decision", "standard"])),
            ("topic", Shape::Text { max_chars: 10 }),
            (
                "sources",
                Shape::array_of(Shape::Int { min: 1, max: 3 }, 1, 2),
            ),
            ("keep", Shape::Bool),
        ])
    }

    #[test]
    fn a_matching_value_passes_and_each_kind_of_mismatch_names_its_place() {
        let ok = json!({"type": "decision", "topic": "tests", "sources": [1, 3], "keep": true, "extra": 1});
        assert_eq!(entry().check(&ok), Ok(()));
        let cases = [
            (
                json!({"type": "vibe", "topic": "t", "sources": [], "keep": true}),
                "$.type",
            ),
            (
                json!({"type": "decision", "topic": "much too long", "sources": [], "keep": true}),
                "$.topic",
            ),
            (
                json!({"type": "decision", "topic": "t", "sources": [1, 2, 3], "keep": true}),
                "$.sources",
            ),
            (
                json!({"type": "decision", "topic": "t", "sources": [4], "keep": true}),
                "$.sources[0]",
            ),
            (
                json!({"type": "decision", "topic": "t", "sources": [1], "keep": "yes"}),
                "$.keep",
            ),
            (
                json!({"type": "decision", "sources": [1], "keep": true}),
                "$.topic: missing",
            ),
            (json!([1]), "$: expected an object"),
            (
                json!({"type": "decision", "topic": "t", "sources": [], "keep": true}),
                "$.sources: 0 items, at least 1",
            ),
        ];
        for (v, want) in cases {
            let err = entry().check(&v).unwrap_err();
            assert!(err.starts_with(want), "{v}: {err}");
        }
    }

    #[test]
    fn the_json_schema_requires_every_field_and_carries_the_bounds() {
        let s = entry().json_schema();
        assert_eq!(s["required"], json!(["type", "topic", "sources", "keep"]));
        assert_eq!(s["additionalProperties"], json!(false));
        assert_eq!(s["properties"]["sources"]["maxItems"], json!(2));
        assert_eq!(s["properties"]["sources"]["minItems"], json!(1));
        assert_eq!(
            s["properties"]["type"]["enum"],
            json!(["decision", "standard"])
        );
    }
}
