//! YAML that a person or a tenant writes into what driftguard reads (Argo CD's
//! per-object `ignore-differences` annotation, argocd-cm's customizations),
//! parsed with the work bounded by its size. An alias repeats what it names,
//! so a kilobyte can stand for gigabytes; go-yaml, which the tools decode
//! with, refuses "excessive aliasing" too.

use serde::de::DeserializeOwned;

/// Parser events and retained anchor copies allowed per input byte, with a
/// floor for short texts: plain YAML makes fewer events than bytes.
const EVENTS_PER_BYTE: usize = 4;
const FLOOR: usize = 4096;

/// [`serde_saphyr::from_str`] within a budget of `EVENTS_PER_BYTE` times the
/// text, which a document without aliases never reaches.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, serde_saphyr::Error> {
    let scale = text.len().saturating_mul(EVENTS_PER_BYTE).max(FLOOR);
    let mut budget = serde_saphyr::Budget::default();
    budget.max_events = scale;
    budget.max_aliases = scale / 16;
    budget.max_recorded_anchor_events = scale;
    budget.max_recorded_anchor_bytes = scale;
    serde_saphyr::from_str_with_options(text, serde_saphyr::options! { budget: Some(budget) })
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    /// A billion laughs: each line doubles the last, ten lines a thousandfold.
    fn laughs(levels: usize) -> String {
        let mut text = String::from("a0: &a0 [\"lol lol lol lol lol lol lol lol\"]\n");
        for i in 1..=levels {
            let p = i - 1;
            text.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        text.push_str(&format!("jsonPointers: *a{levels}\n"));
        text
    }

    #[test]
    fn an_alias_bomb_is_refused_and_plain_yaml_read() {
        // 32,768 copies from 400 bytes: within serde-saphyr's own defaults.
        let bomb = laughs(5);
        assert!(bomb.len() < 500, "{}", bomb.len());
        assert!(serde_saphyr::from_str::<Value>(&bomb).is_ok());
        assert!(super::from_str::<Value>(&bomb).is_err());
        assert!(super::from_str::<Value>(&laughs(8)).is_err());
        let small = laughs(1);
        assert!(super::from_str::<Value>(&small).is_ok());
        let plain = "jsonPointers: [/spec/replicas, /metadata/labels]\n";
        assert!(super::from_str::<Value>(plain).is_ok());
        let long = format!("jsonPointers: [{}]\n", vec!["/spec/x"; 10_000].join(", "));
        assert!(super::from_str::<Value>(&long).is_ok());
    }
}
