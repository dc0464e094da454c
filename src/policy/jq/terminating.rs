//! The subset of jq that always terminates on a finite input, checked on jaq's
//! own syntax tree when a policy loads.
//!
//! Why: a `jqPathExpressions` entry runs in every admission decision, in
//! `driftguard check` and in `driftguard policy lint`. jq can loop (`def`,
//! `range`, `until`, ...), so `last(range(1e12))` would stall all of them.
//! Argo CD cuts such an expression off after 1s and silently skips the rule;
//! we refuse it at load, with its position, so that a rule can never silently
//! stop protecting. Expressions that terminate but are slow are the decision
//! deadline's business, not this module's.
//!
//! The check is an allow-list: every construct below terminates when its
//! parts do, and every builtin named in [`BUILTINS`] terminates when its
//! arguments do. Anything else is refused, naming the construct.

use jaq_core::load::lex::{StrPart, Tok, Token};
use jaq_core::load::{Lexer, Parser};

mod builtins;
mod checker;

#[cfg(test)]
pub(super) use builtins::BUILTINS;

use checker::Checker;

/// Longer expressions are refused: no real rule is this long, and it bounds
/// every scan and jaq's recursion over operator chains.
pub(crate) const MAX_LEN: usize = 4096;
/// Deeper nesting is refused, so that neither this check nor jaq recurses
/// without bound. `|`, `,` and the other binary operators do not nest.
pub(crate) const MAX_DEPTH: usize = 64;

/// More parts are refused: jaq compiles and runs an expression recursively, on
/// the caller's (tokio worker's) stack, so its size must be bounded too. The
/// program run has up to twice as many (its checkpoints, [`super::ticks`]).
pub(crate) const MAX_PARTS: usize = 128;
/// At most this many calls of the builtins that build values (`to_entries`,
/// `map`, ...) in one expression.
pub(crate) const MAX_BUILDS: usize = 3;

const ALLOWED: &str =
    "allowed: field access, [], |, ',', select(...), comparisons, keys, has, test, ...";
/// Why an expression is outside the subset.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Reason {
    #[error("the expression is {0} bytes long; at most {MAX_LEN} are allowed")]
    TooLong(usize),
    #[error("the expression nests deeper than {MAX_DEPTH} levels")]
    TooDeep,
    #[error("the expression has more than {MAX_PARTS} parts (terms and operators)")]
    TooBig,
    #[error("jq syntax error: expected {0}")]
    Syntax(String),
    #[error("`{0}` is not allowed: it can run without bound ({ALLOWED})")]
    Unbounded(String),
    #[error(
        "`{0}` is not allowed: it can build values without bound, as `\"a\" * 1e12` does ({ALLOWED})"
    )]
    Arithmetic(&'static str),
    #[error(
        "`{0}` is not allowed: it rewrites values, and a jqPathExpression only selects paths ({ALLOWED})"
    )]
    Update(&'static str),
    #[error(
        "`{0}` is not allowed: it builds values, and chained it can grow them without bound; a jqPathExpression selects fields ({ALLOWED})"
    )]
    Grows(String),
    #[error(
        "`{0}` is not allowed here: at most {MAX_BUILDS} calls of to_entries, from_entries, with_entries, map, map_values, group_by and unique_by, which build values, in one expression"
    )]
    TooManyBuilds(String),
    #[error("`{0}` is not allowed: format strings are outside the terminating subset ({ALLOWED})")]
    Format(String),
    #[error("`{0}` is not allowed: the variable is not bound in the expression ({ALLOWED})")]
    UnboundVariable(String),
    #[error("`{0}` is not allowed: it reads or acts outside the object ({ALLOWED})")]
    Outside(String),
    #[error("`{0}` is not allowed: it is not a builtin known to terminate ({ALLOWED})")]
    NotAllowListed(String),
}

/// An expression outside the subset: the reason, and the byte offset in the
/// expression of the construct it names.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct Refusal {
    pub offset: usize,
    pub reason: Reason,
}

/// Ok when `code` is in the terminating subset.
pub fn check(code: &str) -> Result<(), Refusal> {
    if code.len() > MAX_LEN {
        return Err(Refusal {
            offset: 0,
            reason: Reason::TooLong(code.len()),
        });
    }
    if let Some(offset) = too_deep_to_parse(code, MAX_DEPTH) {
        return Err(Refusal {
            offset,
            reason: Reason::TooDeep,
        });
    }
    let at = |s: &str| offset_in(code, s);
    let tokens = Lexer::new(code).lex().map_err(|errs| {
        let first = errs.first();
        Refusal {
            offset: first.map_or(code.len(), |(_, rest)| at(rest)),
            reason: Reason::Syntax(first.map_or("a token", |(e, _)| e.as_str()).to_owned()),
        }
    })?;
    let mut flat = Vec::new();
    flatten(&tokens, code, 0, &mut flat)?;
    let term = Parser::new(&tokens).parse(|p| p.term()).map_err(|errs| {
        let first = errs.first();
        Refusal {
            offset: first
                .and_then(|(_, found)| *found)
                .map_or(code.len(), |t| at(t.0)),
            reason: Reason::Syntax(first.map_or("a term", |(e, _)| e.as_str()).to_owned()),
        }
    })?;
    Checker {
        code,
        tokens: flat,
        bound: Vec::new(),
        cursor: 0,
        parts: 0,
        builds: 0,
    }
    .term(&term, 0)
}

/// jaq's lexer and parser recurse once per bracket, string interpolation,
/// `if`, and prefix (`-`, `try`, `reduce`, `def`, ...), at several KiB a
/// level in a debug build: 4 KiB of `(` overflows even a 32 MiB stack. So
/// before they run, this scan bounds that depth from above (open brackets,
/// interpolations and `if`s, plus every prefix seen so far) and returns
/// where it first passes [`MAX_DEPTH`].
pub(super) fn too_deep_to_parse(code: &str, max: usize) -> Option<usize> {
    const PREFIXES: &[&str] = &[
        "try", "catch", "reduce", "foreach", "def", "label", "import", "include",
    ];
    // Per open bracket: whether it is a string interpolation `\(`.
    let mut open: Vec<bool> = Vec::new();
    let mut in_string = false;
    let mut prefixes = 0;
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        let c = bytes[i];
        i += 1;
        if in_string {
            match c {
                b'"' => in_string = false,
                b'\\' if bytes.get(i) == Some(&b'(') => {
                    i += 1;
                    open.push(true);
                    in_string = false;
                }
                b'\\' => i += 1,
                _ => {}
            }
        } else {
            match c {
                b'"' => in_string = true,
                b'#' => {
                    // A comment runs to the end of a line that does not end
                    // in an odd number of backslashes, as jaq reads it.
                    loop {
                        let end = code[i..].find('\n').map_or(code.len(), |n| i + n);
                        let line = code[i..end].trim_end_matches('\r');
                        let odd = line.bytes().rev().take_while(|b| *b == b'\\').count() % 2 == 1;
                        i = (end + 1).min(code.len());
                        if !odd || end == code.len() {
                            break;
                        }
                    }
                }
                b'(' | b'[' | b'{' => open.push(false),
                // Closing an interpolation returns to its string.
                b')' => in_string = open.pop() == Some(true),
                b']' | b'}' => {
                    open.pop();
                }
                b'-' => prefixes += 1,
                b'.' | b'$' | b'@' => {
                    // `.if`, `$end`: names, not keywords.
                    while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_')
                    {
                        i += 1;
                    }
                }
                c if c.is_ascii_alphabetic() || c == b'_' => {
                    while i < bytes.len()
                        && (bytes[i].is_ascii_alphanumeric()
                            || bytes[i] == b'_'
                            || bytes[i] == b':')
                    {
                        i += 1;
                    }
                    match &code[start..i] {
                        "if" => open.push(false),
                        "end" => {
                            open.pop();
                        }
                        word if PREFIXES.contains(&word) => prefixes += 1,
                        _ => {}
                    }
                }
                _ => {}
            }
        }
        if open.len() + prefixes > max {
            return Some(start);
        }
    }
    None
}

/// Byte offset of `part` in `code`; jaq's tokens are slices of the code.
fn offset_in(code: &str, part: &str) -> usize {
    let (start, at) = (code.as_ptr() as usize, part.as_ptr() as usize);
    if (start..=start + code.len()).contains(&at) {
        at - start
    } else {
        0
    }
}

/// Every token with its offset, in source order. Also bounds block nesting,
/// a second guard after [`too_deep_to_parse`].
fn flatten<'s>(
    tokens: &[Token<&'s str>],
    code: &'s str,
    depth: usize,
    out: &mut Vec<(usize, &'s str)>,
) -> Result<(), Refusal> {
    for Token(text, tok) in tokens {
        let offset = offset_in(code, text);
        if depth > MAX_DEPTH {
            return Err(Refusal {
                offset,
                reason: Reason::TooDeep,
            });
        }
        match tok {
            Tok::Block(inner) => {
                // The opening bracket, to place `[...]` and `{...}`.
                out.push((offset, &text[..1]));
                flatten(inner, code, depth + 1, out)?
            }
            Tok::Str(parts) => {
                for part in parts {
                    if let StrPart::Term(t) = part {
                        // `\(` sits just before the block's `(`.
                        let at = offset_in(code, t.0).saturating_sub(1);
                        if let Some(open) = code.get(at..at + 2) {
                            out.push((at, open));
                        }
                        flatten(std::slice::from_ref(t), code, depth + 1, out)?;
                    }
                }
            }
            _ => out.push((offset, text)),
        }
    }
    Ok(())
}
/// What Argo CD users write, and the seed files: the subset accepts them
/// and a policy loads them (`policy::tests`).
#[cfg(test)]
pub(crate) const REAL_WORLD: &[&str] = &[
    ".webhooks[]?.clientConfig.caBundle",
    ".spec.alternateBackends[]?.weight",
    ".spec.clusterIP   # comment",
    ".data",
    ".spec.volumeClaimTemplates[]?.status",
    r#".spec.template.metadata.annotations["linkerd.io/proxy-version"]"#,
    ".spec.template.spec.initContainers",
    ".spec.ports[] | select(.nodePort != null) | .nodePort",
    ".webhooks[].clientConfig.caBundle",
    r#".data["SECRET_KEY"], .data["ACCESS_KEY"], .stringData["SECRET_KEY"], .stringData["ACCESS_KEY"]"#,
    r#".spec.template.spec.initContainers[] | select(.name == "init-container-0")"#,
    r#".metadata.annotations | select(. != null) | .[keys[] | select(startswith("cert-manager.io/"))]"#,
    r#".spec.template.spec.containers[] | select(.name | test("^istio"))"#,
    r#".spec.template.spec.containers[] | select(.name == "a" or .name == "b")"#,
    r#".spec.template.metadata.annotations."kubectl.kubernetes.io/restartedAt""#,
    ".spec.replicas # HPA",
    r#".metadata.labels | select(. != null) | to_entries[] | select(.key | startswith("service.istio.io"))"#,
    r#".spec.containers[] | select(.name == "istio-proxy")"#,
    // Argo CD's own normalizer cases (tests/data/upstream).
    ".spec.fakeField.foo[]",
    r#".spec.template.spec.containers[].env[] | select(.name == "SOME_ENV_VAR")"#,
    ".spec.routes[].rateLimitPolicy.global.descriptors[].entries[]",
    ".spec.servers[1].enabled",
    r#".spec.template.spec.containers[] | select(.name == "init") | .image"#,
    r#".spec.source.helm.parameters | select(.name == "image.tag")"#,
    r#".metadata.annotations | select(.["foo.bar"] == "baz")"#,
    r#".spec.sources[] | select(.repoURL | contains("test-repo")).helm.parameters"#,
    r#".spec | select(.project == "default") | .source.targetRevision"#,
    // Terminates; only slow when repeated (the decision deadline's test).
    "(.,.)|(.,.)|(.,.)|select(false)",
    // Other terminating forms.
    r#".metadata.labels | (to_entries[] | select(.value == "x") | .key) as $k | .[$k]"#,
    r#"if .a then .b elif .c then .d else .e end"#,
    r#"try .a catch .b"#,
    r#".a[1:3], .b[-1], .c[:2], ..|.x?, .[.k // "d"]"#,
    r#".d - 1 + 3, .e + "x", "y" + .f, [] + .g, {} + .h, null + .i, -1 + .j"#,
    r#".[] | map(.x) | first, last(.[]), any(.[]; . == 1), isempty(empty)"#,
    r#".a | split(",") | .[0] | ascii_downcase | tostring"#,
    r#". as [$a, {b: $c}] | $a, $c"#,
    "recurse | error",
];

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(code: &str) -> (usize, String) {
        let r = check(code).expect_err(code);
        (r.offset, r.to_string())
    }

    fn hint(what: &str) -> String {
        format!("{what} ({ALLOWED})")
    }

    #[test]
    fn real_world_expressions_are_accepted() {
        for code in REAL_WORLD {
            assert_eq!(check(code), Ok(()), "{code}");
        }
    }

    /// Each `(code, offset, reason)` is refused at that offset, for that reason.
    fn assert_refused(cases: &[(&str, usize, String)]) {
        for (code, offset, reason) in cases {
            assert_eq!(refused(code), (*offset, reason.clone()), "{code}");
        }
    }

    /// The reason `{what}` is refused with, `because`.
    fn refusal(what: &str, because: &str) -> String {
        hint(&format!("`{what}` is not allowed: {because}"))
    }

    #[test]
    fn every_loop_is_named_with_its_reason() {
        let unbounded = |w: &str| refusal(w, "it can run without bound");
        assert_refused(&[
            ("def f: f; f", 0, unbounded("def")),
            (".a | def f: .; f", 5, unbounded("def")),
            ("reduce .[] as $x (0; . + $x)", 0, unbounded("reduce")),
            ("foreach .[] as $x (0; .)", 0, unbounded("foreach")),
            ("label $out | .a", 0, unbounded("label")),
            (".a | break $out", 5, unbounded("break")),
            ("last(range(1e12)) as $x | .spec", 5, unbounded("range")),
            ("repeat(.)", 0, unbounded("repeat")),
            ("while(true; .)", 0, unbounded("while")),
            ("until(true==false; [.] + [1])", 0, unbounded("until")),
            (".a | recurse(.[])", 5, unbounded("recurse(f)")),
            ("recurse(.[]; . != null)", 0, unbounded("recurse(f; cond)")),
            ("limit(1; .[])", 0, unbounded("limit")),
        ]);
    }

    #[test]
    fn every_read_outside_the_object_is_named_with_its_reason() {
        let outside = |w: &str| refusal(w, "it reads or acts outside the object");
        assert_refused(&[
            ("input", 0, outside("input")),
            (".a, inputs", 4, outside("inputs")),
            (".[$__loc__.line]", 2, outside("$__loc__")),
            ("$ENV.HOME", 0, outside("$ENV")),
        ]);
    }

    #[test]
    fn every_arithmetic_and_update_is_named_with_its_reason() {
        let builds = |w: &str| {
            refusal(
                w,
                r#"it can build values without bound, as `"a" * 1e12` does"#,
            )
        };
        let rewrites = |w: &str| {
            refusal(
                w,
                "it rewrites values, and a jqPathExpression only selects paths",
            )
        };
        assert_refused(&[
            (r#"."a" * 1e12"#, 5, builds("*")),
            (". / 2", 2, builds("/")),
            (".a % 2", 3, builds("%")),
            (".a = 1", 3, rewrites("=")),
            (".a |= 1", 3, rewrites("|=")),
            (".a += 1", 3, rewrites("+=")),
            (".a //= 1", 3, rewrites("//=")),
        ]);
    }

    #[test]
    fn every_format_unbound_variable_and_unknown_builtin_is_named_with_its_reason() {
        let format = |w: &str| refusal(w, "format strings are outside the terminating subset");
        let unbound = |w: &str| refusal(w, "the variable is not bound in the expression");
        let unknown = |w: &str| refusal(w, "it is not a builtin known to terminate");
        assert_refused(&[
            (r#".a | @base64 "x\(.)""#, 5, format("@base64")),
            (".a | @sh", 5, format("@sh")),
            (".[$k]", 2, unbound("$k")),
            ("(. as $k | .), $k", 15, unbound("$k")),
            (".a | walk(.)", 5, unknown("walk")),
            ("select(.a; .b)", 0, unknown("select with 2 arguments")),
            ("some.jq.path.expr", 0, unknown("some")),
        ]);
    }

    fn hint_grows(what: &str) -> String {
        format!(
            "`{what}` is not allowed: it builds values, and chained it can grow them without bound; a jqPathExpression selects fields ({ALLOWED})"
        )
    }

    /// Terminating, but each doubles a value, so a chain of them exhausts
    /// memory before any deadline: `(.+.)|(.+.)|…` on a string.
    #[test]
    fn constructs_that_grow_values_are_refused() {
        let cases: [(&str, usize, &str); 10] = [
            ("(. + .) | (. + .)", 3, "+"),
            (".a as $x | $x + $x", 14, "+"),
            ("[., .] | [., .]", 0, "[...]"),
            (".a | {x: ., y: .}", 5, "{...}"),
            (r#""\(.)\(.)""#, 1, "string interpolation"),
            ("tojson | tojson", 0, "tojson"),
            (r#"gsub("a"; "aa")"#, 0, "gsub"),
            (r#"sub("a"; "aa")"#, 0, "sub"),
            (r#"split("") | join("xx")"#, 12, "join"),
            ("implode", 0, "implode"),
        ];
        for (code, offset, what) in cases {
            assert_eq!(refused(code), (offset, hint_grows(what)), "{code}");
        }
    }

    #[test]
    fn the_first_refused_construct_in_source_order_is_reported() {
        assert_eq!(refused(".a * 2 | range(3)").0, 3);
        assert_eq!(refused("range(3) | .a * 2").0, 0);
        assert_eq!(refused(".a - .b * .c").0, 8);
        assert_eq!(refused("[.[] | . * 2]").0, 0);
        assert_eq!(refused(".a - 1 | .b + .c").0, 12);
    }

    #[test]
    fn syntax_errors_are_placed() {
        let (offset, text) = refused(".a[");
        assert!(text.starts_with("jq syntax error: expected"), "{text}");
        assert_eq!(offset, 3);
        let (_, text) = refused(r#".nothing) | .data["config.yaml"] |= (fromjson | tojson"#);
        assert!(text.starts_with("jq syntax error"), "{text}");
    }

    /// What builds values is bounded in number and never repeats a
    /// generator's outputs (the review's `map(.,.,.,.,.)` chain grew 5x a
    /// step, unticked): a leaf's work stays within a few times its input.
    #[test]
    fn builders_are_bounded() {
        let repeated = ".spec | select(.template | to_entries | group_by(0) | map(.,.,.,.,.) | any(..; false))";
        assert!(matches!(
            check(repeated).unwrap_err().reason,
            Reason::Grows(_)
        ));
        let chained = "select(to_entries | to_entries | to_entries | to_entries | length > 0)";
        assert!(matches!(
            check(chained).unwrap_err().reason,
            Reason::TooManyBuilds(_)
        ));
        for fine in [
            "select(.containers | map(.name) | index(\"x\"))",
            ".metadata.labels | to_entries[] | select(.value == \"x\")",
            "select(with_entries(select(.key | startswith(\"a\"))) | length > 0)",
        ] {
            assert_eq!(check(fine), Ok(()), "{fine}");
        }
    }

    #[test]
    fn length_and_depth_are_capped() {
        let long = format!(".a{}", " ".repeat(MAX_LEN));
        assert_eq!(
            refused(&long).1,
            format!(
                "the expression is {} bytes long; at most 4096 are allowed",
                MAX_LEN + 2
            )
        );
        let deep = format!("{}.{}", "[".repeat(100), "]".repeat(100));
        assert_eq!(
            refused(&deep),
            (64, "the expression nests deeper than 64 levels".to_owned())
        );
        // Brackets in strings and comments are not nesting; interpolations are.
        let quoted = format!(
            ".a | select(. == \"{}\") # {}\n| .b",
            "(".repeat(100),
            "[".repeat(100)
        );
        assert_eq!(check(&quoted), Ok(()));
        let interpolated = format!("{}.{}", "\"\\(".repeat(70), ")\"".repeat(70));
        assert_eq!(
            refused(&interpolated).1,
            "the expression nests deeper than 64 levels"
        );
        let shallow = format!("{}.{}", "\"\\(".repeat(20), ")\"".repeat(20));
        assert_eq!(refused(&shallow), (1, hint_grows("string interpolation")));
        let deep = format!("{}.", "-".repeat(100));
        assert_eq!(
            refused(&deep).1,
            "the expression nests deeper than 64 levels"
        );
        let deep = format!("{}.{}", "try ".repeat(100), "");
        assert_eq!(
            refused(&deep).1,
            "the expression nests deeper than 64 levels"
        );
        // Operator chains are not nesting, but they count as parts.
        let long_pipe = vec![".a"; 30].join(" | ");
        assert_eq!(check(&long_pipe), Ok(()));
        let long_comma = vec![".a"; 30].join(", ");
        assert_eq!(check(&long_comma), Ok(()));
        let too_long = vec![".a"; 100].join(" | ");
        assert_eq!(
            refused(&too_long).1,
            "the expression has more than 128 parts (terms and operators)"
        );
    }

    /// The worst inputs under the caps, compiled and run on a thread with the
    /// 2 MiB stack tokio workers get: no stack overflow, in jaq or here.
    #[test]
    fn worst_accepted_inputs_compile_and_run_on_a_small_stack() {
        let d = MAX_DEPTH - 2;
        let inputs = [
            "(".repeat(d) + "." + &")".repeat(d),
            "-".repeat(d) + ".",
            "try ".repeat(d) + ".",
            "select(".repeat(d) + "." + &")".repeat(d),
            "if . then ".repeat(d) + "." + &" end".repeat(d),
            vec!["."; MAX_PARTS / 2 - 1].join("|"),
            vec!["."; MAX_PARTS / 2 - 1].join(","),
            vec!["1"; MAX_PARTS / 2 - 1].join("+"),
            vec![".a + 1"; MAX_PARTS / 6].join(" | "),
            vec!["."; MAX_PARTS / 3 - 1].join(" as $x|"),
            ".a".repeat(MAX_PARTS / 3),
            ".[]?".repeat(MAX_PARTS / 3),
            ".[.[] | ".repeat(d / 3) + "." + &"]".repeat(d / 3),
        ];
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || {
                for input in inputs {
                    let jq = crate::policy::jq::JqPath::compile(&input)
                        .unwrap_or_else(|e| panic!("{input}: {e}"));
                    let obj = serde_json::json!({"a": [[1, {"a": 2}]]});
                    let none = crate::deadline::Deadline::none();
                    let _ = jq.paths(&crate::policy::jq::JqInput::new(&obj), &none);
                }
            })
            .unwrap()
            .join()
            .unwrap();
    }

    /// The worst inputs under the length cap, refused or not: no stack
    /// overflow, in jaq or here.
    #[test]
    fn worst_case_inputs_do_not_overflow_a_small_stack() {
        let n = MAX_LEN / 2;
        let inputs = [
            "(".repeat(n) + &")".repeat(n),
            "[".repeat(n) + &"]".repeat(n),
            "{a:".repeat(MAX_LEN / 4) + "." + &"}".repeat(MAX_LEN / 4),
            "-".repeat(MAX_LEN - 1) + ".",
            "try ".repeat(MAX_LEN / 4 - 1) + ".",
            "if . then ".repeat(MAX_LEN / 20) + "." + &" end".repeat(MAX_LEN / 20),
            vec!["."; MAX_LEN / 2].join("|"),
            vec!["."; MAX_LEN / 6].join(" as $x|"),
            "\"\\(".repeat(MAX_LEN / 4) + &")\"".repeat(MAX_LEN / 4),
            ".a".repeat(MAX_LEN / 2),
            ".[]".repeat(MAX_LEN / 3),
        ];
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || {
                for input in inputs {
                    let _ = crate::policy::jq::JqPath::compile(&input);
                }
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
