//! jq path expressions (Argo CD `jqPathExpressions`), compiled once with jaq.
//!
//! Argo CD runs `del(EXPR)`. We compile `path(EXPR)` instead: it yields the same
//! set of paths `del` would remove, so jq and JSON-pointer rules end up as one
//! kind of thing (paths to drop) and failures can be reported per rule.

use jaq_core::load::{Arena, File, Loader};
use jaq_core::{Compiler, Ctx, Vars, data, unwrap_valr};
use jaq_json::Val;
use serde::Deserialize;
use serde_json::Value;

use super::path::{Path, Segment};

type JqFilter = jaq_core::compile::Filter<jaq_core::Native<data::JustLut<Val>>>;

/// Paths past this count mean a runaway expression; we stop and report it.
const MAX_PATHS: usize = 10_000;

/// A compiled `jqPathExpressions` entry.
pub struct JqPath {
    source: String,
    filter: JqFilter,
}

impl std::fmt::Debug for JqPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("JqPath").field(&self.source).finish()
    }
}

impl JqPath {
    /// Compiles `expr`. The expression must parse on its own first, so that text
    /// such as `.a) | (.b` cannot escape the `path(...)` wrapper the way it
    /// escapes Argo CD's `del(...)`.
    pub fn compile(expr: &str) -> Result<Self, String> {
        compile_filter(expr)?;
        let filter = compile_filter(&format!("path(\n{expr}\n)"))?;
        Ok(Self {
            source: expr.to_owned(),
            filter,
        })
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// The paths the expression selects in `input`, as `del` would remove them.
    pub fn paths(&self, input: &Value) -> Result<Vec<Path>, String> {
        let input = Val::deserialize(input).map_err(|e| e.to_string())?;
        let ctx = Ctx::<data::JustLut<Val>>::new(&self.filter.lut, Vars::new([]));
        let mut out = Vec::new();
        for item in self.filter.id.run((ctx, input)).map(unwrap_valr) {
            let path = item.map_err(|e| describe_error(&e))?;
            out.push(to_path(&path)?);
            if out.len() > MAX_PATHS {
                return Err(format!("selected more than {MAX_PATHS} paths"));
            }
        }
        Ok(out)
    }
}

fn compile_filter(code: &str) -> Result<JqFilter, String> {
    let defs = jaq_core::defs()
        .chain(jaq_std::defs())
        .chain(jaq_json::defs());
    let funs = jaq_core::funs()
        .chain(jaq_std::funs())
        .chain(jaq_json::funs());
    let loader = Loader::new(defs);
    let arena = Arena::default();
    let modules = loader
        .load(&arena, File { code, path: () })
        .map_err(|errs| {
            let n = errs.len();
            format!("jq syntax error ({n} problem{})", if n == 1 { "" } else { "s" })
        })?;
    Compiler::default()
        .with_funs(funs)
        .compile(modules)
        .map_err(|errs| {
            let names: Vec<String> = errs
                .into_iter()
                .flat_map(|(_, es)| es.into_iter().map(|(name, _)| name.to_string()))
                .collect();
            format!("jq compile error: undefined {}", names.join(", "))
        })
}

/// jaq's error text embeds the whole input value; keep the reason only.
fn describe_error(err: &jaq_core::Error<Val>) -> String {
    let full = err.to_string();
    let mut text = full.split(" with input").next().unwrap_or_default().to_owned();
    if text.len() > 160 {
        let mut end = 160;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str("...");
    }
    if text.contains("path") {
        format!("not a path expression ({text})")
    } else {
        text
    }
}

fn to_path(val: &Val) -> Result<Path, String> {
    let Val::Arr(items) = val else {
        return Err(format!("path(...) produced a non-array: {val}"));
    };
    items
        .iter()
        .map(|seg| match seg {
            Val::TStr(_) | Val::BStr(_) => {
                let s = seg.to_string();
                // Display quotes strings as JSON; decode that back.
                serde_json::from_str::<String>(&s)
                    .map(Segment::Key)
                    .map_err(|e| e.to_string())
            }
            Val::Num(n) => n
                .to_string()
                .parse::<i64>()
                .map(Segment::Index)
                .map_err(|_| format!("path index {n} is not an integer")),
            other => Err(format!("unsupported path component {other}")),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn paths(expr: &str, obj: Value) -> Result<Vec<String>, String> {
        let jq = JqPath::compile(expr).expect("compiles");
        jq.paths(&obj)
            .map(|ps| ps.iter().map(|p| p.to_pointer()).collect())
    }

    #[test]
    fn select_on_array_elements_yields_element_paths() {
        let obj = json!({"spec": {"containers": [{"name": "app"}, {"name": "istio-proxy"}]}});
        let got = paths(r#".spec.containers[] | select(.name == "istio-proxy")"#, obj).unwrap();
        assert_eq!(got, vec!["/spec/containers/1"]);
    }

    #[test]
    fn to_entries_is_not_a_path_expression() {
        let obj = json!({"metadata": {"labels": {"service.istio.io/x": "1"}}});
        let err = paths(
            r#".metadata.labels | select(. != null) | to_entries[] | select(.key | startswith("service.istio.io"))"#,
            obj,
        )
        .unwrap_err();
        assert!(err.contains("not a path expression"), "{err}");
    }

    #[test]
    fn keys_index_rewrite_is_a_path_expression() {
        let obj = json!({"metadata": {"labels": {"service.istio.io/x": "1", "app": "a"}}});
        let got = paths(
            r#".metadata.labels | select(. != null) | .[keys[] | select(startswith("service.istio.io"))]"#,
            obj,
        )
        .unwrap();
        assert_eq!(got, vec!["/metadata/labels/service.istio.io~1x"]);
    }

    #[test]
    fn unbalanced_expression_cannot_escape_the_wrapper() {
        // Argo CD splices this into del(...) and runs a value rewrite instead.
        let err = JqPath::compile(r#".nothing) | .data["config.yaml"] |= (fromjson | del(.auth) | tojson"#)
            .unwrap_err();
        assert!(err.contains("syntax"), "{err}");
    }

    #[test]
    fn illegal_expression_is_rejected_at_compile_time() {
        assert!(JqPath::compile(r#".spec.template.spec.containers[] | select(.name == "missing-quote)"#).is_err());
    }

    #[test]
    fn runtime_error_is_reported_not_swallowed() {
        let err = paths(".spec.fakeField.foo[]", json!({"spec": {}})).unwrap_err();
        assert!(!err.is_empty());
    }

    #[test]
    fn non_terminating_update_expression_fails_fast_as_non_path() {
        let err = paths("until(true==false; [.] + [1])", json!({"a": 1})).unwrap_err();
        assert!(err.contains("path"), "{err}");
    }

    #[test]
    fn trailing_comment_does_not_break_wrapper() {
        let got = paths(".spec.replicas # HPA", json!({"spec": {"replicas": 2}})).unwrap();
        assert_eq!(got, vec!["/spec/replicas"]);
    }
}
