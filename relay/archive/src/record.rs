//! The snapshot record format (`docs/snapshot.md`): one table row as one line of JSON — `"t"` (the table) first,
//! then the columns in the order of `personkit_store::archive::TABLES`, values as SQLite holds them (text as JSON
//! strings, integers as numbers, reals as numbers with a point or an exponent, NULL as null, the one blob column as
//! lowercase hex). [`encode`] writes a row,
//! [`parse_record`] reads one back and checks it, [`dump`] writes a corpus's rows in canonical order. The store
//! only reads and writes the rows (`dump_rows`, `restore`).

use personkit_store::Connection;
use personkit_store::archive::{self, DumpError, SnapshotRow, TABLES, TableSpec, Value, ValueRef};

/// One parsed snapshot record, ready to insert: its table (an index into `TABLES`) and its values in
/// `TableSpec::columns` order.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub table: usize,
    pub values: Vec<Value>,
}

impl SnapshotRow for Record {
    fn table(&self) -> usize {
        self.table
    }
    fn values(&self) -> &[Value] {
        &self.values
    }
}

/// Writes `s` as a JSON string.
fn push_json_str(out: &mut Vec<u8>, s: &str) {
    // A string always serialises; the fallback keeps the record well-formed regardless.
    if serde_json::to_writer(&mut *out, s).is_err() {
        out.extend_from_slice(b"\"\"");
    }
}

/// Appends the record of one row of `table` (values in its column order) to `line`, without a newline.
pub fn encode(line: &mut Vec<u8>, table: &TableSpec, values: &[ValueRef<'_>]) {
    line.extend_from_slice(b"{\"t\":");
    push_json_str(line, table.name);
    for (c, v) in table.columns.iter().zip(values) {
        line.push(b',');
        push_json_str(line, c);
        line.push(b':');
        match v {
            ValueRef::Null => line.extend_from_slice(b"null"),
            ValueRef::Integer(n) => line.extend_from_slice(n.to_string().as_bytes()),
            ValueRef::Real(f) => line.extend_from_slice(
                serde_json::to_string(f)
                    .unwrap_or_else(|_| "null".into())
                    .as_bytes(),
            ),
            ValueRef::Text(b) => push_json_str(line, &String::from_utf8_lossy(b)),
            ValueRef::Blob(b) => push_json_str(line, &hex::encode(b)),
        }
    }
    line.push(b'}');
}

/// Calls `each` with every snapshot record of the corpus (one line, no newline) in canonical order.
pub fn dump(
    conn: &Connection,
    mut each: impl FnMut(&[u8]) -> std::io::Result<()>,
) -> Result<(), DumpError> {
    let mut line = Vec::with_capacity(4096);
    archive::dump_rows(conn, |table, values| {
        line.clear();
        encode(&mut line, table, values);
        each(&line)
    })
}

/// Parses one record line, checking the table, every column (no more, no fewer) and each value's type.
pub fn parse_record(line: &[u8]) -> Result<Record, String> {
    let v: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(line).map_err(|e| format!("not a JSON object: {e}"))?;
    let name = v
        .get("t")
        .and_then(|t| t.as_str())
        .ok_or("no table name (\"t\")")?;
    let table = TABLES.iter().position(|t| t.name == name).ok_or_else(|| {
        format!(
            "unknown table {:?}",
            name.chars().take(40).collect::<String>()
        )
    })?;
    let spec = &TABLES[table];
    let missing = spec
        .added_columns
        .iter()
        .filter(|c| !v.contains_key(**c))
        .count();
    if v.len() + missing != spec.columns.len() + 1 {
        return Err(format!(
            "a {} record has {} columns, this one {}",
            spec.name,
            spec.columns.len(),
            v.len() - 1
        ));
    }
    let mut values = Vec::with_capacity(spec.columns.len());
    for c in spec.columns {
        let val = match v.get(*c) {
            Some(val) => val,
            None if spec.added_columns.contains(c) => &serde_json::Value::Null,
            None => return Err(format!("{} record without {c}", spec.name)),
        };
        values.push(match val {
            serde_json::Value::Null => Value::Null,
            // Integers are written without a point, reals always with one or an exponent (`serde_json`'s form).
            serde_json::Value::Number(n) if n.is_f64() && spec.real_columns.contains(c) => {
                Value::Real(
                    n.as_f64()
                        .filter(|f| f.is_finite())
                        .ok_or_else(|| format!("{}.{c} is not a finite number", spec.name))?,
                )
            }
            serde_json::Value::Number(n) => Value::Integer(
                n.as_i64()
                    .ok_or_else(|| format!("{}.{c} is not an integer", spec.name))?,
            ),
            serde_json::Value::String(s) if spec.blob_columns.contains(c) => {
                Value::Blob(hex::decode(s).map_err(|_| format!("{}.{c} is not hex", spec.name))?)
            }
            serde_json::Value::String(s) => Value::Text(s.clone()),
            _ => return Err(format!("{}.{c} has a value of the wrong type", spec.name)),
        });
    }
    Ok(Record { table, values })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn index(name: &str) -> usize {
        TABLES.iter().position(|t| t.name == name).unwrap()
    }

    fn as_ref(v: &Value) -> ValueRef<'_> {
        match v {
            Value::Null => ValueRef::Null,
            Value::Integer(n) => ValueRef::Integer(*n),
            Value::Real(f) => ValueRef::Real(*f),
            Value::Text(s) => ValueRef::Text(s.as_bytes()),
            Value::Blob(b) => ValueRef::Blob(b),
        }
    }

    #[test]
    fn a_row_of_every_table_reads_back_as_written() {
        for (i, spec) in TABLES.iter().enumerate() {
            let values: Vec<Value> = spec
                .columns
                .iter()
                .enumerate()
                .map(|(n, c)| {
                    if spec.blob_columns.contains(c) {
                        Value::Blob(vec![0, 0xab, n as u8])
                    } else if n % 3 == 0 {
                        Value::Text(format!("{c} \"quoted\" \n é"))
                    } else if n % 3 == 1 {
                        Value::Integer(-(n as i64) * 1_000_000_007)
                    } else {
                        Value::Null
                    }
                })
                .collect();
            let refs: Vec<ValueRef<'_>> = values.iter().map(as_ref).collect();
            let mut line = Vec::new();
            encode(&mut line, spec, &refs);
            assert!(
                line.starts_with(format!("{{\"t\":\"{}\",", spec.name).as_bytes()),
                "the table comes first"
            );
            assert!(!line.contains(&b'\n'), "one line");
            assert_eq!(parse_record(&line).unwrap(), Record { table: i, values });
        }
    }

    #[test]
    fn a_record_written_before_a_column_was_added_restores_it_as_null() {
        let old = br#"{"t":"entity_merge_candidates","a":"x","b":"y","kind":"person","a_name":"A","b_name":"B","similarity":0.5,"state":"dismissed","created_at":"2026","decided_at":"2026"}"#;
        let r = parse_record(old).unwrap();
        assert_eq!(r.values.last(), Some(&Value::Null), "kept reads as NULL");
        let new = br#"{"t":"entity_merge_candidates","a":"x","b":"y","kind":"person","a_name":"A","b_name":"B","similarity":0.5,"state":"merged","created_at":"2026","decided_at":"2026","kept":"x"}"#;
        assert_eq!(
            parse_record(new).unwrap().values.last(),
            Some(&Value::Text("x".into()))
        );
        // Only an added column may be missing.
        let short = br#"{"t":"entity_merge_candidates","a":"x","b":"y","kind":"person","a_name":"A","b_name":"B","similarity":0.5,"state":"merged","created_at":"2026","kept":"x"}"#;
        assert!(parse_record(short).is_err());
    }

    #[test]
    fn a_record_of_the_wrong_shape_is_refused_with_the_reason() {
        let spec = &TABLES[index("forgotten_messages")];
        let good = br#"{"t":"forgotten_messages","id":"m","thread_id":"t","forgotten_at":"2026"}"#;
        assert_eq!(parse_record(good).unwrap().table, index(spec.name));
        let cases: [(&[u8], &str); 6] = [
            (b"[1]", "not a JSON object"),
            (br#"{"id":"m"}"#, "no table name"),
            (br#"{"t":"devices","id":"m"}"#, "unknown table"),
            (
                br#"{"t":"forgotten_messages","id":"m","thread_id":"t"}"#,
                "has 3 columns, this one 2",
            ),
            (
                br#"{"t":"forgotten_messages","id":1.5,"thread_id":"t","forgotten_at":"x"}"#,
                "forgotten_messages.id is not an integer",
            ),
            (
                br#"{"t":"forgotten_messages","id":[],"thread_id":"t","forgotten_at":"x"}"#,
                "wrong type",
            ),
        ];
        for (line, why) in cases {
            let e = parse_record(line).unwrap_err();
            assert!(e.contains(why), "{e} should say {why}");
        }
        let blob = TABLES.iter().find(|t| !t.blob_columns.is_empty()).unwrap();
        let mut obj = serde_json::Map::new();
        obj.insert("t".into(), blob.name.into());
        for c in blob.columns {
            obj.insert((*c).into(), serde_json::Value::Null);
        }
        obj.insert(blob.blob_columns[0].into(), "not hex".into());
        let e = parse_record(&serde_json::to_vec(&obj).unwrap()).unwrap_err();
        assert!(e.contains("is not hex"), "{e}");
    }
}
