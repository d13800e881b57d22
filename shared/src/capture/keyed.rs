//! [`Keyed`]: a JSON object held as a list of `(key, value)` pairs. The capture core's maps (enabled surfaces,
//! per-surface stats, the `storage.session` area) hold a handful of entries, and a list costs far less WASM than a
//! `BTreeMap` per value type (the extension ships under a size budget).

use std::fmt;
use std::marker::PhantomData;

use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// String keys to values, serialised as a JSON object. A key appears at most once (a repeated key in the input
/// keeps its last value, as with a map).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keyed<V>(Vec<(String, V)>);

impl<V> Default for Keyed<V> {
    fn default() -> Self {
        Keyed(Vec::new())
    }
}

impl<V> Keyed<V> {
    pub fn get(&self, key: &str) -> Option<&V> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Sets `key` to `value`, replacing any value it had.
    pub fn insert(&mut self, key: String, value: V) {
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => *v = value,
            None => self.0.push((key, value)),
        }
    }

    /// The value at `key`, inserted as `V::default()` when missing.
    pub fn entry(&mut self, key: &str) -> &mut V
    where
        V: Default,
    {
        let i = match self.0.iter().position(|(k, _)| k == key) {
            Some(i) => i,
            None => {
                self.0.push((key.to_owned(), V::default()));
                self.0.len() - 1
            }
        };
        &mut self.0[i].1
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &V)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<V> FromIterator<(String, V)> for Keyed<V> {
    fn from_iter<I: IntoIterator<Item = (String, V)>>(iter: I) -> Self {
        let mut out = Keyed::default();
        for (k, v) in iter {
            out.insert(k, v);
        }
        out
    }
}

impl<V: Serialize> Serialize for Keyed<V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for Keyed<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ObjectVisitor<V>(PhantomData<V>);

        impl<'de, V: Deserialize<'de>> Visitor<'de> for ObjectVisitor<V> {
            type Value = Keyed<V>;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Keyed<V>, A::Error> {
                let mut out = Keyed::default();
                while let Some((k, v)) = map.next_entry::<String, V>()? {
                    out.insert(k, v);
                }
                Ok(out)
            }
        }

        d.deserialize_map(ObjectVisitor(PhantomData))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn an_object_round_trips_and_a_repeated_key_keeps_its_last_value() {
        let k: Keyed<u32> = serde_json::from_str(r#"{"a": 1, "b": 2, "a": 3}"#).unwrap();
        assert_eq!(k.len(), 2);
        assert_eq!(k.get("a"), Some(&3));
        assert_eq!(serde_json::to_string(&k).unwrap(), r#"{"a":3,"b":2}"#);
        assert!(serde_json::from_str::<Keyed<u32>>("[1]").is_err());
        assert!(serde_json::from_str::<Keyed<u32>>(r#"{"a": "x"}"#).is_err());
    }

    #[test]
    fn insert_and_entry() {
        let mut k: Keyed<u32> = Keyed::default();
        assert!(k.is_empty());
        *k.entry("x") += 2;
        *k.entry("x") += 3;
        k.insert("y".into(), 7);
        k.insert("y".into(), 8);
        assert_eq!(k.iter().collect::<Vec<_>>(), [("x", &5), ("y", &8)]);
        assert!(k.contains_key("y") && !k.contains_key("z"));
    }
}
