//! YAML that a person or a tenant writes into what driftguard reads (Argo CD's
//! per-object `ignore-differences` annotation, argocd-cm's customizations),
//! parsed with the work bounded by its size. An alias repeats what it names,
//! so a kilobyte can stand for gigabytes; go-yaml, which the tools decode
//! with, refuses "excessive aliasing" too.

use serde::de::DeserializeOwned;

/// Parser events (replayed aliases included), nodes, scalar bytes and
/// retained anchor copies allowed: one per input byte, with a floor for short
/// texts. Plain YAML makes fewer events than bytes (each scalar takes at
/// least a byte and a separator), so only aliases reach it, and what a parse
/// builds stays within what the same text parsed as JSON would.
const FLOOR: usize = 4096;

/// [`serde_saphyr::from_str`] within a budget of the text's length.
pub(crate) fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, serde_saphyr::Error> {
    let scale = text.len().max(FLOOR);
    let mut budget = serde_saphyr::Budget::default();
    budget.max_events = scale;
    budget.max_nodes = scale;
    budget.max_total_scalar_bytes = scale;
    budget.max_aliases = scale / 16;
    budget.max_anchors = scale / 16;
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
        let dense = format!("[{}]\n", vec!["1"; 100_000].join(","));
        assert!(super::from_str::<Value>(&dense).is_ok());
        let block: String = (0..20_000).map(|i| format!("a{i}: 1\n")).collect();
        assert!(super::from_str::<Value>(&block).is_ok());
    }

    /// Long anchored strings, each named by a few aliases (within any
    /// alias-to-anchor ratio): what the parse builds stays within the text's
    /// size, where serde-saphyr's defaults build ten times it.
    #[test]
    fn anchored_strings_repeated_build_no_more_than_the_text() {
        let mut text = String::new();
        for i in 0..100 {
            text.push_str(&format!("a{i}: &a{i} \"{}\"\n", "x".repeat(1000)));
            text.push_str(&format!(
                "b{i}: [{}]\n",
                vec![format!("*a{i}"); 10].join(", ")
            ));
        }
        let built = |v: Value| serde_json::to_string(&v).unwrap().len();
        let unbounded = serde_saphyr::from_str::<Value>(&text).map(built).unwrap();
        assert!(
            unbounded > 10 * text.len(),
            "{unbounded} from {}",
            text.len()
        );
        if let Ok(bytes) = super::from_str::<Value>(&text).map(built) {
            assert!(bytes <= 2 * text.len(), "{bytes} from {}", text.len());
        }
    }
}
