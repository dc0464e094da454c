//! Finds FieldsV1 leaves (`f:spec`, `k:{"name":"app"}`, `v:"x"`, `i:0`) in an
//! object. Keyed and set lists are indexed once per list and key shape, so
//! locating n leaves in a list of n items costs O(n log n), not O(n²).
//! Only scalar keys are indexed (every key the apiserver writes); an object
//! or array as a key value, or a float, falls back to a scan, which the
//! decision's deadline bounds ([`Deadline::checkpoint`]).

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::path::{Path, Segment};
use crate::deadline::{Deadline, Stopped};

/// The index of one list for one key shape: the key fields (none for `v:`),
/// and for each key, the position of the first item that has it.
type ListIndex = HashMap<Vec<String>, usize>;

/// Locates leaves in objects that outlive it, remembering the lists it
/// indexed (by address: the borrow keeps each list alive and unchanged).
pub struct Locator<'a> {
    /// By the list's address and the key's field names.
    lists: HashMap<(usize, Vec<String>), ListIndex>,
    deadline: &'a Deadline,
}

impl<'a> Locator<'a> {
    /// A locator for one decision, stopped with it at `deadline`.
    pub fn new(deadline: &'a Deadline) -> Self {
        Self {
            lists: HashMap::new(),
            deadline,
        }
    }

    /// Where one FieldsV1 leaf is in `obj`, and its value there.
    pub fn leaf(
        &mut self,
        keys: &[String],
        obj: &'a Value,
    ) -> Result<Option<(Path, &'a Value)>, Stopped> {
        let mut node = obj;
        let mut path = Vec::with_capacity(keys.len());
        for key in keys {
            let Some((seg, child)) = self.step(key, node)? else {
                return Ok(None);
            };
            path.push(seg);
            node = child;
        }
        Ok(Some((Path(path), node)))
    }

    fn step(&mut self, key: &str, obj: &'a Value) -> Result<Option<(Segment, &'a Value)>, Stopped> {
        if let Some(name) = key.strip_prefix("f:") {
            return Ok(obj.get(name).map(|v| (Segment::Key(name.to_owned()), v)));
        }
        let Some(items) = obj.as_array() else {
            return Ok(None);
        };
        let position = if let Some(k) = key.strip_prefix("k:") {
            let Ok(want) = serde_json::from_str::<Map<String, Value>>(k) else {
                return Ok(None);
            };
            match scalar_keys(want.values()) {
                Some(wanted) => {
                    let fields: Vec<String> = want.keys().cloned().collect();
                    self.index(items, fields)?.get(&wanted).copied()
                }
                None => self.scan(items, |item| {
                    want.iter().all(|(f, v)| item.get(f) == Some(v))
                })?,
            }
        } else if let Some(v) = key.strip_prefix("v:") {
            let Ok(want) = serde_json::from_str::<Value>(v) else {
                return Ok(None);
            };
            match scalar_key(&want) {
                Some(wanted) => self.index(items, Vec::new())?.get(&vec![wanted]).copied(),
                None => self.scan(items, |item| *item == want)?,
            }
        } else if let Some(i) = key.strip_prefix("i:") {
            i.parse::<usize>().ok().filter(|i| *i < items.len())
        } else {
            None
        };
        Ok(position.map(|p| (Segment::Index(p as i64), &items[p])))
    }

    /// The first of `items` that `is` selects, with a checkpoint per item.
    fn scan(&self, items: &[Value], is: impl Fn(&Value) -> bool) -> Result<Option<usize>, Stopped> {
        for (i, item) in items.iter().enumerate() {
            self.deadline.checkpoint()?;
            if is(item) {
                return Ok(Some(i));
            }
        }
        Ok(None)
    }

    /// The index of `items` by `fields` (by the whole item when empty),
    /// built on first use.
    fn index(&mut self, items: &[Value], fields: Vec<String>) -> Result<&ListIndex, Stopped> {
        use std::collections::hash_map::Entry;
        let address = items.as_ptr() as usize;
        match self.lists.entry((address, fields)) {
            Entry::Occupied(known) => Ok(known.into_mut()),
            Entry::Vacant(new) => {
                let index = index_of(items, &new.key().1, self.deadline)?;
                Ok(new.insert(index))
            }
        }
    }
}

fn index_of(items: &[Value], fields: &[String], deadline: &Deadline) -> Result<ListIndex, Stopped> {
    let mut index = ListIndex::new();
    for (i, item) in items.iter().enumerate() {
        deadline.checkpoint()?;
        let key = if fields.is_empty() {
            scalar_key(item).map(|k| vec![k])
        } else {
            fields
                .iter()
                .map(|f| item.get(f).and_then(scalar_key))
                .collect()
        };
        if let Some(key) = key {
            index.entry(key).or_insert(i);
        }
    }
    Ok(index)
}

/// A text equal for two scalars exactly when `Value`'s `==` says so: strings,
/// booleans, null and integers; `None` for floats (`0.0 == -0.0`), objects and
/// arrays, which are scanned.
fn scalar_key(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(format!("s{s}")),
        Value::Bool(b) => Some(format!("b{b}")),
        Value::Null => Some("n".into()),
        Value::Number(n) if n.is_u64() || n.is_i64() => Some(format!("i{n}")),
        _ => None,
    }
}

fn scalar_keys<'a>(values: impl Iterator<Item = &'a Value>) -> Option<Vec<String>> {
    values.map(scalar_key).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The scan the index replaces.
    fn scan(key: &str, items: &[Value]) -> Option<usize> {
        let k = key.strip_prefix("k:")?;
        let want: Map<String, Value> = serde_json::from_str(k).ok()?;
        items
            .iter()
            .position(|item| want.iter().all(|(f, v)| item.get(f) == Some(v)))
    }

    #[test]
    fn keyed_and_set_lists_agree_with_a_scan() {
        let items = json!([
            {"name": "a", "port": 80, "protocol": "TCP"},
            {"name": "a", "port": 80, "protocol": "UDP"},
            {"name": "b", "port": 1.0},
            {"name": 1},
            {"name": "1"},
            {"name": null},
            {"port": 80},
            {"name": "a"},
            {"name": {"x": 1}},
            {"name": true}
        ]);
        let list = items.as_array().unwrap();
        let obj = json!({"spec": {"list": items.clone()}});
        let none = Deadline::none();
        let mut locator = Locator::new(&none);
        for key in [
            r#"k:{"name":"a"}"#,
            r#"k:{"name":"a","port":80}"#,
            r#"k:{"port":80,"protocol":"UDP"}"#,
            r#"k:{"name":1}"#,
            r#"k:{"name":"1"}"#,
            r#"k:{"name":null}"#,
            r#"k:{"name":true}"#,
            r#"k:{"name":"b","port":1.0}"#,
            r#"k:{"name":"b","port":1}"#,
            r#"k:{"name":{"x":1}}"#,
            r#"k:{"name":"zzz"}"#,
            r#"k:{"port":80}"#,
        ] {
            let keys = vec!["f:spec".to_owned(), "f:list".to_owned(), key.to_owned()];
            let found = locator
                .leaf(&keys, &obj)
                .unwrap()
                .map(|(p, _)| p.0[2].clone());
            assert_eq!(
                found,
                scan(key, list).map(|i| Segment::Index(i as i64)),
                "{key}"
            );
        }
        let set = json!({"s": ["x", 1, "1", null, 2.5, "x"]});
        for (key, at) in [
            (r#"v:"x""#, Some(0)),
            ("v:1", Some(1)),
            (r#"v:"1""#, Some(2)),
            ("v:null", Some(3)),
            ("v:2.5", Some(4)),
            ("v:3", None),
        ] {
            let keys = vec!["f:s".to_owned(), key.to_owned()];
            let found = locator
                .leaf(&keys, &set)
                .unwrap()
                .map(|(p, _)| p.0[1].clone());
            assert_eq!(found, at.map(Segment::Index), "{key}");
        }
    }
}
