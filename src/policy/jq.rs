//! jq path expressions (Argo CD `jqPathExpressions`), compiled once with jaq.
//!
//! Argo CD runs `del(EXPR)`. We compile `path(EXPR)` instead: it yields the same
//! set of paths `del` would remove, so jq and JSON-pointer rules end up as one
//! kind of thing (paths to drop) and failures can be reported per rule.
//! Only expressions in the terminating subset (`terminating`) compile.

mod prune;
pub(crate) mod terminating;
mod ticks;

use jaq_core::load::{Arena, File, Loader};
use jaq_core::{Compiler, Ctx, Vars, data};
use jaq_json::Val;
use serde_json::Value;

use super::path::{Path, Segment};
use crate::deadline::{Deadline, Stopped};

use std::sync::Arc;

type JqFilter = jaq_core::Filter<Decision>;

/// What a program runs on: jaq's values, with the decision's [`Deadline`]
/// as the data its natives see (the checkpoints, [`ticks`]).
pub(crate) struct Decision;

impl data::DataT for Decision {
    type V<'a> = Val;
    type Data<'a> = RunData<'a>;
}

/// The data of one run: the program's definitions and the deadline.
#[derive(Clone)]
pub(crate) struct RunData<'a> {
    lut: &'a jaq_core::Lut<Decision>,
    deadline: &'a Deadline,
}

impl<'a> data::HasLut<'a, Decision> for RunData<'a> {
    fn lut(&self) -> &'a jaq_core::Lut<Decision> {
        self.lut
    }
}

/// What one run of an expression gives when the decision goes on: its paths,
/// or why the rule failed (reported, the decision goes on).
pub type Ran = Result<Vec<Path>, RunError>;

/// An expression that does not compile.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// Outside the terminating subset, or not jq: placed in the expression.
    #[error(transparent)]
    Refused(#[from] terminating::Refusal),
    /// jaq's own parser or compiler refused it.
    #[error(transparent)]
    Jaq(#[from] JaqError),
}

/// What jaq's loader or compiler refused.
#[derive(Debug, thiserror::Error)]
pub enum JaqError {
    /// jaq's parser found `count` problems.
    #[error("jq syntax error ({count} problem{})", if *count == 1 { "" } else { "s" })]
    Syntax {
        /// How many.
        count: usize,
    },
    /// Names that are neither jq's, jaq-std's nor jaq-json's.
    #[error("jq compile error: undefined {}", names.join(", "))]
    Undefined {
        /// The names.
        names: Vec<String>,
    },
}

/// Why a compiled expression failed on an object; the rule then ignores
/// nothing there, and the failure is reported.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// jaq raised an error: only its text, which jaq's `Error` exposes.
    #[error("{0}")]
    Jaq(String),
    /// `path(...)` yielded something other than an array.
    #[error("path(...) produced a non-array: {0}")]
    NotAnArray(String),
    /// A path key that is not a string jaq can print back as JSON.
    #[error("{0}")]
    Key(serde_json::Error),
    /// A path index that is not an integer.
    #[error("path index {0} is not an integer")]
    Index(String),
    /// A path component that is neither a key nor an index.
    #[error("unsupported path component {0}")]
    Component(String),
    /// A runaway expression.
    #[error("selected more than {MAX_PATHS} paths")]
    TooMany,
    /// The whole object (`.`, `..`, `getpath([])`, `X // .`), or its
    /// `apiVersion` or `kind` (`.[]`): like the empty JSON pointer, it would
    /// ignore every field, so the rule ignores nothing.
    #[error(
        "selects {0}, which would ignore every field (like the empty JSON pointer): the rule ignores nothing"
    )]
    WholeObject(&'static str),
}

impl CompileError {
    /// Byte offset in the expression of what was refused, when known.
    pub fn offset(&self) -> Option<usize> {
        match self {
            Self::Refused(r) => Some(r.offset),
            Self::Jaq(_) => None,
        }
    }
}

/// Paths past this count mean a runaway expression; we stop and report it.
const MAX_PATHS: usize = 10_000;

/// A compiled `jqPathExpressions` entry.
pub struct JqPath {
    source: String,
    filter: Arc<JqFilter>,
    /// When the expression starts with a plain field chain (`.spec.template…`),
    /// the rest of it compiled to run on that subtree: converting a few hundred
    /// bytes for jaq instead of the whole object.
    narrowed: Option<(Vec<String>, Arc<JqFilter>)>,
}

impl std::fmt::Debug for JqPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("JqPath").field(&self.source).finish()
    }
}

impl JqPath {
    /// Compiles `expr`. The expression must be in the terminating subset and
    /// parse on its own first, so that text such as `.a) | (.b` cannot escape
    /// the `path(...)` wrapper the way it escapes Argo CD's `del(...)`.
    pub fn compile(expr: &str) -> Result<Self, CompileError> {
        terminating::check(expr)?;
        let wrapped = format!("path(\n{}\n)", ticks::ticked(expr)?);
        let filter = match shared::cached(&wrapped) {
            Some(filter) => filter,
            None => {
                compile_filter(expr)?;
                shared::compile(&wrapped)?
            }
        };
        let narrowed = split_field_prefix(expr).and_then(|(prefix, rest)| {
            let rest = ticks::ticked(&rest).ok()?;
            shared::compile(&format!("path(\n{rest}\n)"))
                .ok()
                .map(|f| (prefix, f))
        });
        Ok(Self {
            source: expr.to_owned(),
            filter,
            narrowed,
        })
    }

    /// The expression as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// True when the expression can only see a subtree that is equal in both
    /// objects: it then selects the same paths in both, which cannot change
    /// the diff, so it need not run.
    pub fn sees_no_change(&self, old: &Value, new: &Value) -> bool {
        self.narrowed.as_ref().is_some_and(|(prefix, _)| {
            matches!((walk_objects(old, prefix), walk_objects(new, prefix)), (Some(a), Some(b)) if a == b)
        })
    }

    /// The paths the expression selects in `input`, as `del` would remove
    /// them; `Err` when the decision must stop (its deadline passed, or no
    /// program may run where it is tried: [`Deadline::allow_jq`]).
    pub fn paths(&self, input: &JqInput, deadline: &Deadline) -> Result<Ran, Stopped> {
        // A program may run for hours: only where the deadline allows it.
        deadline.allow_jq()?;
        if let Some((prefix, filter)) = &self.narrowed
            && let Some(sub) = walk_objects(input.value, prefix)
        {
            let val = sub.map_or(Val::Null, to_val);
            let base: Vec<Segment> = prefix.iter().cloned().map(Segment::Key).collect();
            return run(filter, val, &base, deadline);
        }
        run(&self.filter, input.val().clone(), &[], deadline)
    }
}

/// Converts directly rather than through serde's visitor: maps are built with
/// their final capacity, which matters on the hot path.
fn to_val(value: &Value) -> Val {
    match value {
        Value::Null => Val::Null,
        Value::Bool(b) => Val::from(*b),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Val::Num(jaq_json::Num::from_integral(i)),
            (None, Some(f)) => Val::from(f),
            // u64 beyond i64: keep it exact.
            (None, None) => Val::Num(jaq_json::Num::from_integral(n.as_u64().unwrap_or_default())),
        },
        Value::String(s) => Val::utf8_str(s.clone().into_bytes()),
        Value::Array(items) => items.iter().map(to_val).collect(),
        Value::Object(map) => {
            let mut m = jaq_json::Map::with_capacity_and_hasher(map.len(), Default::default());
            for (k, v) in map {
                m.insert(Val::utf8_str(k.clone().into_bytes()), to_val(v));
            }
            Val::obj(m)
        }
    }
}

/// Runs a compiled `path(...)` filter and prefixes each path with `base`.
/// The run ends at its first error: a program's, or a checkpoint's halt
/// ([`ticks`]), which no `try` catches.
fn run(
    filter: &JqFilter,
    input: Val,
    base: &[Segment],
    deadline: &Deadline,
) -> Result<Ran, Stopped> {
    let data = RunData {
        lut: &filter.lut,
        deadline,
    };
    let ctx = Ctx::<Decision>::new(data, Vars::new([]));
    let mut out = Vec::new();
    for item in filter.id.run((ctx, input)) {
        let path = match item {
            Ok(path) => path,
            Err(exn) => return failed(exn, deadline).map(Err),
        };
        let path = match to_path(&path) {
            Ok(path) => path,
            Err(e) => return Ok(Err(e)),
        };
        let mut full = base.to_vec();
        full.extend(path.0);
        if let Some(what) = whole_object(&full) {
            return Ok(Err(RunError::WholeObject(what)));
        }
        out.push(Path(full));
        if out.len() > MAX_PATHS {
            return Ok(Err(RunError::TooMany));
        }
    }
    // A stop the program swallowed would leave its paths short: none can
    // (a halt is caught by nothing), but the deadline has the last word.
    if deadline.has_passed() {
        return Err(Stopped::Passed);
    }
    Ok(Ok(out))
}

/// A run that ended with `exn`: stopped when the deadline says it has passed
/// (what a checkpoint's halt means), else the program's own failure. Judged
/// by the deadline, not the halt: a program cannot forge a stop, and a halt
/// of its own (refused by the terminating subset anyway) stays its error.
fn failed(exn: jaq_core::Exn<Val>, deadline: &Deadline) -> Result<RunError, Stopped> {
    if deadline.has_passed() {
        return Err(Stopped::Passed);
    }
    Ok(match exn.get_err() {
        Ok(e) => RunError::Jaq(describe_error(&e)),
        Err(other) => RunError::Jaq(match other.get_halt() {
            Ok(code) => format!("the program halted (exit code {code})"),
            Err(_) => "the program ended without a value".to_owned(),
        }),
    })
}

/// What a selected path takes with it if it stands for the whole object:
/// the root itself, or `apiVersion` or `kind`, which no rule has a reason to
/// ignore and which a top-level wildcard (`.[]`, `..`) always reaches.
fn whole_object(path: &[Segment]) -> Option<&'static str> {
    match path {
        [] => Some("the whole object"),
        [Segment::Key(k)] if k == "apiVersion" || k == "kind" => {
            Some("every top-level field (apiVersion or kind)")
        }
        _ => None,
    }
}

/// Follows `prefix` through objects as jq's `.a.b` would: `Some(None)` when a
/// key is missing (jq yields null), `None` when a non-object is in the way
/// (jq would raise an error, so the full expression must run to report it).
fn walk_objects<'v>(value: &'v Value, prefix: &[String]) -> Option<Option<&'v Value>> {
    let mut node = Some(value);
    for key in prefix {
        node = match node {
            Some(Value::Object(map)) => map.get(key),
            None | Some(Value::Null) => None,
            Some(_) => return None,
        };
    }
    Some(node)
}

/// Splits `.a.b.c REST` into `(["a","b","c"], ".REST")` when the first pipeline
/// stage is a plain path chain (`.ident`, `[]`, `[N]`, `?`), so that every later
/// stage only sees values under `.a.b.c`. Anything else (`,`, `//`, operators,
/// variables) keeps the whole-object evaluation.
pub(crate) fn split_field_prefix(expr: &str) -> Option<(Vec<String>, String)> {
    let text = expr.trim();
    let first_stage = &text[..top_level_pipe(text).unwrap_or(text.len())];
    if !is_plain_chain(first_stage.trim_end()) {
        return None;
    }
    let bytes = text.as_bytes();
    let mut prefix = Vec::new();
    let mut pos = 0;
    while bytes.get(pos) == Some(&b'.') {
        let start = pos + 1;
        let mut end = start;
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
            end += 1;
        }
        let ident_ok = end > start && !bytes[start].is_ascii_digit();
        // `.a?` suppresses errors on `.a` itself: keep it in the jq part.
        if !ident_ok || bytes.get(end) == Some(&b'?') {
            break;
        }
        prefix.push(text[start..end].to_owned());
        pos = end;
    }
    if prefix.is_empty() {
        return None;
    }
    let rest = text[pos..].trim_start();
    let rest = if rest.starts_with('.') {
        rest.to_owned()
    } else {
        format!(".{rest}")
    };
    Some((prefix, rest))
}

/// Byte offset of the first `|` outside brackets and strings.
fn top_level_pipe(text: &str) -> Option<usize> {
    let mut depth = 0i32;
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            '|' if depth == 0 => return Some(i),
            _ => {}
        }
    }
    None
}

/// `.ident`, `[]`, `[N]` and `?` only, starting with `.ident`.
fn is_plain_chain(stage: &str) -> bool {
    let b = stage.as_bytes();
    if b.first() != Some(&b'.') {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'.' => {
                let start = i + 1;
                i = start;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
                if i == start || b[start].is_ascii_digit() {
                    return false;
                }
            }
            b'?' => i += 1,
            b'[' => {
                let close = match stage[i..].find(']') {
                    Some(c) => i + c,
                    None => return false,
                };
                if !stage[i + 1..close].bytes().all(|c| c.is_ascii_digit()) {
                    return false;
                }
                i = close + 1;
            }
            _ => return false,
        }
    }
    true
}

/// An object converted to jaq's value type once, on first use, and shared by
/// every jq rule that runs on it.
pub struct JqInput<'a> {
    value: &'a Value,
    val: std::cell::OnceCell<Val>,
}

impl<'a> JqInput<'a> {
    /// `value`, not converted yet.
    pub fn new(value: &'a Value) -> Self {
        Self {
            value,
            val: std::cell::OnceCell::new(),
        }
    }

    /// The object as JSON.
    pub fn value(&self) -> &'a Value {
        self.value
    }

    fn val(&self) -> &Val {
        self.val.get_or_init(|| to_val(self.value))
    }
}

/// Compiled programs shared by every rule with the same expression text: a
/// jaq program carries its own copy of the standard library (tens of KB),
/// and 2,000 Applications repeat the same few expressions.
mod shared {
    use super::{JaqError, JqFilter, compile_filter};
    use std::collections::HashMap;
    use std::sync::{Arc, LazyLock, Mutex, Weak};

    static PROGRAMS: LazyLock<Mutex<HashMap<String, Weak<JqFilter>>>> =
        LazyLock::new(Default::default);

    pub fn cached(code: &str) -> Option<Arc<JqFilter>> {
        let programs = PROGRAMS.lock().unwrap_or_else(|e| e.into_inner());
        programs.get(code).and_then(Weak::upgrade)
    }

    pub fn compile(code: &str) -> Result<Arc<JqFilter>, JaqError> {
        if let Some(filter) = cached(code) {
            return Ok(filter);
        }
        let filter = Arc::new(compile_filter(code)?);
        let mut programs = PROGRAMS.lock().unwrap_or_else(|e| e.into_inner());
        programs.insert(code.to_owned(), Arc::downgrade(&filter));
        // Forget programs no rule holds any more, now and then.
        if programs.len().is_multiple_of(1024) {
            programs.retain(|_, p| p.strong_count() > 0);
        }
        Ok(filter)
    }
}

fn compile_filter(code: &str) -> Result<JqFilter, JaqError> {
    let mut needed = prune::needed_by(code);
    let defs = std::mem::take(&mut needed.defs);
    compile_with(code, defs, |name| needed.calls(name))
}

/// Compiles `code` with `defs` and the native filters `native` keeps.
fn compile_with(
    code: &str,
    defs: Vec<jaq_core::load::parse::Def>,
    native: impl Fn(&str) -> bool,
) -> Result<JqFilter, JaqError> {
    let funs = jaq_core::funs()
        .chain(jaq_std::funs())
        .chain(jaq_json::funs())
        .chain([ticks::tick()])
        .filter(|(name, _, _)| native(name));
    let loader = Loader::new(defs);
    let arena = Arena::default();
    let modules = loader
        .load(&arena, File { code, path: () })
        .map_err(|errs| JaqError::Syntax { count: errs.len() })?;
    Compiler::default()
        .with_funs(funs)
        .compile(modules)
        .map_err(|errs| JaqError::Undefined {
            names: errs
                .into_iter()
                .flat_map(|(_, es)| es.into_iter().map(|(name, _)| name.to_string()))
                .collect(),
        })
}

/// jaq's error text embeds the whole input value; keep the reason only.
/// jaq 3.1's `Error` is opaque (its parts are private, `path_expr` only builds
/// one), so telling a path-expression error from others can only read the text.
fn describe_error(err: &jaq_core::Error<Val>) -> String {
    let full = err.to_string();
    let text = crate::text::ellipsize(full.split(" with input").next().unwrap_or_default(), 160);
    if text.contains("path") {
        format!("not a path expression ({text})")
    } else {
        text
    }
}

fn to_path(val: &Val) -> Result<Path, RunError> {
    let Val::Arr(items) = val else {
        return Err(RunError::NotAnArray(val.to_string()));
    };
    items
        .iter()
        .map(|seg| match seg {
            Val::TStr(_) | Val::BStr(_) => {
                let s = seg.to_string();
                // Display quotes strings as JSON; decode that back.
                serde_json::from_str::<String>(&s)
                    .map(Segment::Key)
                    .map_err(RunError::Key)
            }
            Val::Num(n) => n
                .to_string()
                .parse::<i64>()
                .map(Segment::Index)
                .map_err(|_| RunError::Index(n.to_string())),
            other => Err(RunError::Component(other.to_string())),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Every output (or error) of `code` on each of `inputs`, as text.
    pub(super) fn outputs_of(code: &str, inputs: &[Value]) -> Vec<String> {
        match compile_filter(code) {
            Ok(filter) => inputs.iter().flat_map(|i| outputs(&filter, i)).collect(),
            Err(e) => vec![format!("compile error: {e}")],
        }
    }

    /// Every output (or error) of `filter` on `input`, as text.
    fn outputs(filter: &JqFilter, input: &Value) -> Vec<String> {
        let deadline = Deadline::none();
        let data = RunData {
            lut: &filter.lut,
            deadline: &deadline,
        };
        let ctx = Ctx::<Decision>::new(data, Vars::new([]));
        filter
            .id
            .run((ctx, to_val(input)))
            .map(|r| match r.map_err(jaq_core::Exn::get_err) {
                Ok(v) => v.to_string(),
                Err(Ok(e)) => format!("error: {e}"),
                Err(Err(exn)) => format!("exception: {exn:?}"),
            })
            .collect()
    }

    /// Compiling with only the definitions a program reaches changes
    /// nothing it computes: every builtin of the terminating subset, at
    /// every arity, on every kind of value, against the whole library.
    #[test]
    fn the_pruned_library_computes_what_the_whole_one_does() {
        let all: Vec<_> = jaq_core::defs()
            .chain(jaq_std::defs())
            .chain(jaq_json::defs())
            .collect();
        let input = json!({"a": [1, "b", {"c": null}], "s": "x.y", "n": 2.5, "t": true,
                           "o": {"k": "v", "name": "side"}, "e": []});
        let mut compared = 0;
        for (name, arities) in terminating::BUILTINS {
            for arity in *arities {
                let args = vec!["."; *arity].join("; ");
                let call = if *arity == 0 {
                    name.to_string()
                } else {
                    format!("{name}({args})")
                };
                let code = format!("[.. | try ({call}) catch \"caught\"]");
                let pruned = compile_filter(&code).unwrap_or_else(|e| panic!("{code}: {e}"));
                let whole = compile_with(&code, all.clone(), |_| true).unwrap();
                assert_eq!(outputs(&pruned, &input), outputs(&whole, &input), "{code}");
                compared += 1;
            }
        }
        assert!(compared >= 80, "{compared}");
    }

    fn paths(expr: &str, obj: Value) -> Result<Vec<String>, String> {
        let jq = JqPath::compile(expr).expect("compiles");
        jq.paths(&JqInput::new(&obj), &Deadline::none())
            .expect("no deadline")
            .map(|ps| ps.iter().map(|p| p.to_pointer()).collect())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn select_on_array_elements_yields_element_paths() {
        let obj = json!({"spec": {"containers": [{"name": "app"}, {"name": "istio-proxy"}]}});
        let got = paths(
            r#".spec.containers[] | select(.name == "istio-proxy")"#,
            obj,
        )
        .unwrap();
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
        let err = JqPath::compile(
            r#".nothing) | .data["config.yaml"] |= (fromjson | del(.auth) | tojson"#,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("syntax"), "{err}");
    }

    #[test]
    fn illegal_expression_is_rejected_at_compile_time() {
        assert!(
            JqPath::compile(
                r#".spec.template.spec.containers[] | select(.name == "missing-quote)"#
            )
            .is_err()
        );
    }

    #[test]
    fn runtime_error_is_reported_not_swallowed() {
        let err = paths(".spec.fakeField.foo[]", json!({"spec": {}})).unwrap_err();
        assert!(!err.is_empty());
    }

    #[test]
    fn non_terminating_expression_is_refused_at_compile_time() {
        // Argo CD runs it for 1s and skips the rule; it never reaches jaq here.
        let err = JqPath::compile("until(true==false; [.] + [1])").unwrap_err();
        assert_eq!(err.offset(), Some(0));
        assert!(
            err.to_string()
                .starts_with("`until` is not allowed: it can run without bound"),
            "{err}"
        );
    }

    #[test]
    fn narrowing_splits_only_plain_chains() {
        let split = |e: &str| split_field_prefix(e).map(|(p, r)| (p.join("."), r));
        assert_eq!(
            split(r#".spec.template.spec.containers[] | select(.name == "x")"#),
            Some((
                "spec.template.spec.containers".into(),
                r#".[] | select(.name == "x")"#.into()
            ))
        );
        assert_eq!(
            split(".spec.replicas"),
            Some(("spec.replicas".into(), ".".into()))
        );
        assert_eq!(split(".a?.b"), None);
        assert_eq!(split(".a.b // .c"), None);
        assert_eq!(split(".a.b, .c"), None);
        assert_eq!(split(r#".metadata.annotations."x/y""#), None);
        assert_eq!(split("..|.a?"), None);
    }

    #[test]
    fn narrowed_and_whole_object_evaluation_agree() {
        let objects = [
            json!({"spec": {"template": {"spec": {"containers": [{"name": "a"}, {"name": "istio-proxy"}]}}}}),
            json!({"spec": {"template": "oops"}}),
            json!({"spec": null}),
            json!({}),
            json!({"metadata": {"annotations": {"cert-manager.io/issuer": "x", "b": "c"}}, "spec": {"replicas": 2}}),
            json!({"metadata": {"labels": null}}),
        ];
        let exprs = [
            r#".spec.template.spec.containers[] | select(.name == "istio-proxy")"#,
            ".spec.template.spec.containers[0]",
            ".spec.replicas",
            ".spec.template.spec.containers[].name",
            r#".metadata.annotations | select(. != null) | .[keys[] | select(startswith("cert-manager.io/"))]"#,
            ".metadata.labels | select(. != null) | to_entries[]",
            ".spec.fakeField.foo[]",
        ];
        for expr in exprs {
            let narrowed = JqPath::compile(expr).unwrap();
            assert!(narrowed.narrowed.is_some(), "{expr} should narrow");
            let mut whole = JqPath::compile(expr).unwrap();
            whole.narrowed = None;
            for obj in &objects {
                let input = JqInput::new(obj);
                let none = Deadline::none();
                let a = narrowed.paths(&input, &none).unwrap();
                let b = whole.paths(&input, &none).unwrap();
                let (a, b) = (
                    a.map_err(|e| e.to_string().is_empty()),
                    b.map_err(|e| e.to_string().is_empty()),
                );
                assert_eq!(a, b, "{expr} on {obj}");
            }
        }
    }

    #[test]
    fn trailing_comment_does_not_break_wrapper() {
        let got = paths(".spec.replicas # HPA", json!({"spec": {"replicas": 2}})).unwrap();
        assert_eq!(got, vec!["/spec/replicas"]);
    }
}
