//! Deadline checkpoints inside jq programs.
//!
//! The terminating subset ([`super::terminating`]) ends on every input, but
//! not soon: `(.,.)|(.,.)|…` doubles its work at every step, and
//! `(A == A) == (A == A)` squares it. jaq has no step limit and a thread
//! cannot be interrupted, so the program is printed again with a call to
//! [`TICK`] after every step that can multiply work: on the right of every
//! `|`, and on every output of a cartesian operator, `if`, `try`, a call with
//! arguments or a path with computed indices. [`TICK`] is the identity (in
//! path mode too) and a [`crate::deadline::Deadline::check_now`] on the
//! run's deadline (jaq's custom data, [`super::RunData`]): past it, it halts
//! the program, which no `try`, `?`, `//` or `label` catches, and the run
//! ends there ([`super::run`]) with its thread free. The deadline is sticky,
//! so a construct that runs its argument again (`//` in path mode) halts
//! again. Between two ticks a program does one leaf's work (`..`, `keys`,
//! `sort`), which is bounded by the input.

use jaq_core::box_iter::box_once;
use jaq_core::load::lex::StrPart;
use jaq_core::load::parse::{BinaryOp, Pattern, Term};
use jaq_core::load::{Lexer, Parser};
use jaq_core::native::Fun;
use jaq_core::ops::{Cmp, Math};
use jaq_core::path::{Opt, Part};
use jaq_core::{Ctx, Cv, Exn, Native};

use super::Decision;
use super::terminating::{MAX_DEPTH, Reason, Refusal, too_deep_to_parse};

/// The checkpoint's name: no expression can call it, since the terminating
/// subset allows only the builtins it lists.
pub const TICK: &str = "__driftguard_tick";

/// How deep the printed program may nest: each level of the source adds at
/// most one parenthesis or keyword (`if`, `try`) to its own.
const PRINTED_DEPTH: usize = 2 * MAX_DEPTH + 2;

/// The exit code of a checkpoint's halt. Only for the record: whether a run
/// was stopped is the deadline's to say
/// ([`crate::deadline::Deadline::has_passed`]).
const STOPPED_EXIT_CODE: i32 = 124;

/// The native filter behind [`TICK`].
pub fn tick() -> Fun<Decision> {
    fn passed(ctx: &Ctx<'_, Decision>) -> bool {
        ctx.data().deadline.check_now().is_err()
    }
    let native = Native::new(|cv: Cv<'_, Decision>| {
        if passed(&cv.0) {
            return box_once(Err(Exn::halt(STOPPED_EXIT_CODE)));
        }
        box_once(Ok(cv.1))
    })
    .with_paths(|cv: Cv<'_, Decision, _>| {
        if passed(&cv.0) {
            return box_once(Err(Exn::halt(STOPPED_EXIT_CODE)));
        }
        box_once(Ok(cv.1))
    });
    (TICK, Box::new([]), native)
}

/// `code` (in the terminating subset) with its checkpoints. Refused when the
/// printed program nests deeper than the subset allows.
pub fn ticked(code: &str) -> Result<String, Refusal> {
    let syntax = |what: &str| Refusal {
        offset: 0,
        reason: Reason::Syntax(what.to_owned()),
    };
    let tokens = Lexer::new(code).lex().map_err(|_| syntax("a token"))?;
    let term = Parser::new(&tokens)
        .parse(|p| p.term())
        .map_err(|_| syntax("a term"))?;
    let mut out = String::with_capacity(code.len() * 2);
    print(&term, &mut out).ok_or_else(|| syntax("a construct of the terminating subset"))?;
    match too_deep_to_parse(&out, PRINTED_DEPTH) {
        Some(_) => Err(Refusal {
            offset: 0,
            reason: Reason::TooDeep,
        }),
        None => Ok(out),
    }
}

/// Prints `t`, ticked; `None` for a construct outside the subset.
fn print(t: &Term<&str>, out: &mut String) -> Option<()> {
    match t {
        Term::Id => out.push('.'),
        Term::Recurse => out.push_str(".."),
        Term::Num(n) | Term::Var(n) => out.push_str(n),
        Term::Str(None, parts) => string(parts, out)?,
        Term::Arr(None) => out.push_str("[]"),
        Term::Obj(entries) if entries.is_empty() => out.push_str("{}"),
        Term::Neg(t) => {
            out.push_str("- ");
            operand(t, out)?;
        }
        Term::BinOp(l, op, r) => binary(l, op, r, out)?,
        Term::TryCatch(body, catch) => ticking(out, |out| {
            out.push_str("try ");
            operand(body, out)?;
            if let Some(c) = catch {
                out.push_str(" catch ");
                operand(c, out)?;
            }
            Some(())
        })?,
        Term::IfThenElse(branches, otherwise) => ticking(out, |out| {
            for (i, (cond, then)) in branches.iter().enumerate() {
                out.push_str(if i == 0 { "if " } else { " elif " });
                print(cond, out)?;
                out.push_str(" then ");
                print(then, out)?;
            }
            if let Some(e) = otherwise {
                out.push_str(" else ");
                print(e, out)?;
            }
            out.push_str(" end");
            Some(())
        })?,
        Term::Call(name, args) if args.is_empty() => out.push_str(name),
        Term::Call(name, args) => ticking(out, |out| {
            out.push_str(name);
            list(out, ("(", "; ", ")"), args, print)
        })?,
        Term::Path(head, path) => {
            let computed = path.0.iter().any(|(part, _)| match part {
                Part::Index(i) => !is_constant(i),
                Part::Range(from, to) => [from, to].into_iter().flatten().any(|t| !is_constant(t)),
            });
            let parts = |out: &mut String| {
                // A path head stays one term: `(.[1:])[k]?` is not `.[1:][k]?`.
                match **head {
                    Term::Id => out.push('.'),
                    _ => atom(head, out)?,
                }
                for (part, opt) in &path.0 {
                    out.push('[');
                    match part {
                        Part::Index(i) => print(i, out)?,
                        Part::Range(from, to) => {
                            if let Some(f) = from {
                                print(f, out)?;
                            }
                            if from.is_some() || to.is_some() {
                                out.push(':');
                            }
                            if let Some(t) = to {
                                print(t, out)?;
                            }
                        }
                    }
                    out.push(']');
                    if matches!(opt, Opt::Optional) {
                        out.push('?');
                    }
                }
                Some(())
            };
            if computed {
                ticking(out, parts)?
            } else {
                parts(out)?
            }
        }
        _ => return None,
    }
    Some(())
}

/// `(<what> | TICK)`: a checkpoint on every output.
fn ticking(out: &mut String, what: impl FnOnce(&mut String) -> Option<()>) -> Option<()> {
    out.push('(');
    what(out)?;
    out.push_str(" | ");
    out.push_str(TICK);
    out.push(')');
    Some(())
}

/// `t` in parentheses.
fn atom(t: &Term<&str>, out: &mut String) -> Option<()> {
    out.push('(');
    print(t, out)?;
    out.push(')');
    Some(())
}

/// `t` where a postfix term goes: in parentheses if it is an operator's.
fn operand(t: &Term<&str>, out: &mut String) -> Option<()> {
    match t {
        Term::BinOp(..) => atom(t, out),
        _ => print(t, out),
    }
}

/// Pipes stay flat (`l | TICK | r`, right-associative) and commas too (left):
/// they add no nesting. Every other operator multiplies its operands' outputs.
fn binary(l: &Term<&str>, op: &BinaryOp<&str>, r: &Term<&str>, out: &mut String) -> Option<()> {
    let side = |t: &Term<&str>, bare: bool, out: &mut String| {
        if bare { print(t, out) } else { operand(t, out) }
    };
    match op {
        BinaryOp::Pipe(pattern) => {
            side(l, false, out)?;
            if let Some(p) = pattern {
                out.push_str(" as ");
                bind(p, out)?;
            }
            out.push_str(" | ");
            out.push_str(TICK);
            out.push_str(" | ");
            side(r, true, out)
        }
        BinaryOp::Comma => {
            side(l, matches!(l, Term::BinOp(_, BinaryOp::Comma, _)), out)?;
            out.push_str(", ");
            side(r, false, out)
        }
        op => {
            let text = symbol(op)?;
            ticking(out, |out| {
                side(l, false, out)?;
                out.push(' ');
                out.push_str(text);
                out.push(' ');
                side(r, false, out)
            })
        }
    }
}

fn symbol(op: &BinaryOp<&str>) -> Option<&'static str> {
    Some(match op {
        BinaryOp::Alt => "//",
        BinaryOp::Or => "or",
        BinaryOp::And => "and",
        BinaryOp::Math(Math::Add) => "+",
        BinaryOp::Math(Math::Sub) => "-",
        BinaryOp::Cmp(c) => match c {
            Cmp::Lt => "<",
            Cmp::Le => "<=",
            Cmp::Gt => ">",
            Cmp::Ge => ">=",
            Cmp::Eq => "==",
            Cmp::Ne => "!=",
        },
        _ => return None,
    })
}

fn bind(p: &Pattern<&str>, out: &mut String) -> Option<()> {
    match p {
        Pattern::Var(x) => out.push_str(x),
        Pattern::Arr(items) => list(out, ("[", ", ", "]"), items, bind)?,
        Pattern::Obj(entries) => list(out, ("{", ", ", "}"), entries, |(key, item), out| {
            atom(key, out)?;
            out.push_str(": ");
            bind(item, out)
        })?,
    }
    Some(())
}

/// `items` printed by `each`, between `open` and `close`, `sep` apart.
fn list<T>(
    out: &mut String,
    (open, sep, close): (&str, &str, &str),
    items: &[T],
    each: impl Fn(&T, &mut String) -> Option<()>,
) -> Option<()> {
    out.push_str(open);
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(sep);
        }
        each(item, out)?;
    }
    out.push_str(close);
    Some(())
}

/// A string without interpolation, escaped as JSON (which jq reads).
fn string(parts: &[StrPart<&str, Term<&str>>], out: &mut String) -> Option<()> {
    out.push('"');
    for part in parts {
        match part {
            // Raw text between escapes: no quote or backslash in it.
            StrPart::Str(s) => out.push_str(s),
            StrPart::Char(c) => {
                let json = serde_json::to_string(&c.to_string()).ok()?;
                out.push_str(&json[1..json.len() - 1]);
            }
            StrPart::Term(_) => return None,
        }
    }
    out.push('"');
    Some(())
}

/// An index that yields one value: a number, a string or a variable.
fn is_constant(t: &Term<&str>) -> bool {
    match t {
        Term::Num(_) | Term::Var(_) => true,
        Term::Str(None, parts) => parts.iter().all(|p| !matches!(p, StrPart::Term(_))),
        Term::Neg(t) => is_constant(t),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_multiplying_step_is_ticked_and_chains_stay_flat() {
        let doubled = ticked(&vec!["(.,.)"; 40].join("|")).unwrap();
        assert_eq!(doubled.matches(TICK).count(), 39, "{doubled}");
        assert!(!doubled.contains("(("), "{doubled}");
        for (code, ticks) in [
            (".spec.replicas", 0),
            (".a[] | .b", 1),
            (".a, .b, .c", 0),
            ("select(.a == 1)", 2),
            (".[keys[]]", 1),
            ("if .a then .b else .c end", 1),
            (".a?", 0),
            ("(.a | .b)?", 2),
            ("try .a catch .b", 1),
            (". as [$a, {b: $b}] | $a", 1),
        ] {
            let out = ticked(code).unwrap();
            assert_eq!(out.matches(TICK).count(), ticks, "{code} -> {out}");
        }
    }

    #[test]
    fn a_chain_that_prints_too_deep_is_refused() {
        let chain = vec![".a"; 100].join(" or ");
        assert_eq!(ticked(&chain).unwrap_err().reason, Reason::TooDeep);
    }

    /// Expressions of the subset, nested: leaves and every combinator the
    /// printer handles.
    fn expression() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let leaf = prop::sample::select(vec![
            ".",
            "..",
            ".a",
            ".b[]",
            ".[]?",
            ".a[0]",
            ".[1:]",
            "1",
            "\"a\\n\\\"\"",
            "null",
            "keys",
            "length",
            "-1",
            "[]",
            "{}",
            "tostring",
        ])
        .prop_map(str::to_owned);
        leaf.prop_recursive(4, 24, 3, |inner| {
            let two = (inner.clone(), inner.clone());
            prop_oneof![
                two.clone().prop_map(|(a, b)| format!("{a} | {b}")),
                two.clone().prop_map(|(a, b)| format!("{a}, {b}")),
                two.clone().prop_map(|(a, b)| format!("({a}) == ({b})")),
                two.clone().prop_map(|(a, b)| format!("({a}) or ({b})")),
                two.clone().prop_map(|(a, b)| format!("({a}) // ({b})")),
                two.clone()
                    .prop_map(|(a, b)| format!("({a}) as $v | {b}, $v")),
                two.clone()
                    .prop_map(|(a, b)| format!("({a}) as [$v, {{a: $w}}] | {b}, $v, $w")),
                two.clone()
                    .prop_map(|(a, b)| format!("if {a} then {b} else . end")),
                two.clone()
                    .prop_map(|(a, b)| format!("try ({a}) catch ({b})")),
                two.prop_map(|(a, b)| format!("({a})[{b}]?")),
                inner.clone().prop_map(|a| format!("select({a})")),
                inner.clone().prop_map(|a| format!("first({a})")),
                inner.clone().prop_map(|a| format!("({a})?")),
                inner.clone().prop_map(|a| format!("- ({a})")),
                inner.prop_map(|a| format!("({a}) + 1")),
            ]
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(400))]

        /// The checkpoints change no output, error or path.
        #[test]
        fn a_ticked_program_selects_what_the_original_does(code in expression()) {
            let Ok(()) = super::super::terminating::check(&code) else {
                return Ok(());
            };
            let printed = ticked(&code).unwrap();
            let inputs = [
                serde_json::json!({"a": [1, {"a": 2}], "b": {"x": null}}),
                serde_json::json!([{"a": true}, "s", 2]),
                serde_json::json!(null),
            ];
            for wrap in ["{}", "path({})", "[paths] | length, ({})"] {
                let original = super::super::tests::outputs_of(&wrap.replace("{}", &code), &inputs);
                let ticked = super::super::tests::outputs_of(&wrap.replace("{}", &printed), &inputs);
                proptest::prop_assert_eq!(original, ticked, "{} printed {}", code, printed);
            }
        }
    }
}

/// The checkpoints stop a program whatever it is wrapped in: a halt that
/// `try`, `?`, `//`, `label` or a builtin caught would let a runaway rule
/// hold its thread past the deadline.
#[cfg(test)]
mod stopping {
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    use jaq_core::{Ctx, Vars};
    use serde_json::json;

    use super::super::{Decision, RunData, RunError, compile_with, run, to_val};
    use super::ticked;
    use crate::deadline::{Deadline, Stopped};

    /// Doubles its work 30 times and never yields: hours without checkpoints.
    fn slow() -> String {
        ticked(&format!("{}|select(false)", vec!["(.,.)"; 30].join("|"))).unwrap()
    }

    /// Wrappers around `S` (the slow program): error handlers, alternatives,
    /// labels, builtins that take the first output or test for one, and
    /// constructs that collect outputs. Outside the terminating subset too.
    const WRAPPERS: &[&str] = &[
        "S",
        "try (S)",
        "try (S) catch 1",
        "(S)?",
        "(S) // 1",
        "(S)? // 1",
        "try (try (S) catch 1) catch 2",
        "label $out | S",
        "label $out | (S | ., break $out)",
        "first(S)",
        "last(S)",
        "limit(1; S)",
        "isempty(S)",
        "any(S; .)",
        "all(S; .)",
        "def isvalid(f): try (f | true) catch false; isvalid(S)",
        "[S]",
        "{a: (S)}",
        "(S) as $x | $x",
        "reduce (S) as $x (0; .)",
        "foreach (S) as $x (0; .)",
        "if S then 1 else 2 end",
        "[.[]?, (S)] | length",
        "try error(S) catch 1",
        "path(S)",
        "path(try (S))",
        "path((S)?)",
        "path((S) // .a)",
        "path((S)? // .a)",
        "path(first(S))",
        "path(label $out | S)",
        "path(if S then .a else .b end)",
    ];

    /// Every wrapper's first error (none if it ran to its end) and whether
    /// the deadline passed, each on a thread of its own: a wrapper that
    /// swallowed the stop would run for hours, and fails here instead.
    fn run_each(wrap: impl Fn(&str) -> String) -> Vec<(String, Option<String>, bool)> {
        let slow = slow();
        let mut out = Vec::new();
        for wrapper in WRAPPERS {
            let code = wrap(&wrapper.replace('S', &slow));
            let (tx, rx) = mpsc::channel();
            let program = code.clone();
            std::thread::spawn(move || {
                let all = jaq_core::defs()
                    .chain(jaq_std::defs())
                    .chain(jaq_json::defs())
                    .collect();
                let filter = compile_with(&program, all, |_| true).unwrap();
                let deadline = Deadline::at(Instant::now() + Duration::from_millis(20));
                let data = RunData {
                    lut: &filter.lut,
                    deadline: &deadline,
                };
                let ctx = Ctx::<Decision>::new(data, Vars::new([]));
                let error = filter
                    .id
                    .run((ctx, to_val(&json!({"a": 1}))))
                    .find_map(Result::err)
                    .map(|e| format!("{e:?}"));
                let _ = tx.send((error, deadline.has_passed()));
            });
            let (error, passed) = rx
                .recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|_| panic!("{wrapper}: not stopped at its deadline"));
            out.push((wrapper.to_string(), error, passed));
        }
        out
    }

    #[test]
    fn a_slow_program_stops_at_its_deadline_whatever_wraps_it() {
        for (wrapper, error, passed) in run_each(str::to_owned) {
            assert!(passed, "{wrapper}: the deadline did not pass");
            let error = error.unwrap_or_else(|| panic!("{wrapper}: ended without the stop"));
            assert!(error.contains("Halt"), "{wrapper}: {error}");
        }
    }

    /// As the server reads a rule: `path(...)` run by [`run`], which tells
    /// the decision it stopped.
    #[test]
    fn a_rule_run_stopped_anywhere_in_it_is_a_stopped_decision() {
        let slow = slow();
        for wrapper in WRAPPERS.iter().filter(|w| w.starts_with("path(")) {
            let all = jaq_core::defs()
                .chain(jaq_std::defs())
                .chain(jaq_json::defs())
                .collect();
            let filter = compile_with(&wrapper.replace('S', &slow), all, |_| true).unwrap();
            let deadline = Deadline::at(Instant::now() + Duration::from_millis(20));
            let started = Instant::now();
            let ran = run(&filter, to_val(&json!({"a": 1})), &[], &deadline);
            assert!(matches!(ran, Err(Stopped::Passed)), "{wrapper}: {ran:?}");
            assert!(started.elapsed() < Duration::from_secs(10), "{wrapper}");
        }
    }

    /// A program's own halt (refused by the terminating subset anyway) is
    /// its error, whatever its code: only the deadline says a run stopped.
    #[test]
    fn a_programs_own_halt_is_its_error_not_a_stop() {
        assert!(super::super::JqPath::compile("halt").is_err());
        assert!(super::super::JqPath::compile("halt_error(124)").is_err());
        let all: Vec<_> = jaq_core::defs()
            .chain(jaq_std::defs())
            .chain(jaq_json::defs())
            .collect();
        for code in [3, super::STOPPED_EXIT_CODE] {
            let program = format!("path(if halt({code}) then .a else .b end)");
            let filter = compile_with(&program, all.clone(), |_| true).unwrap();
            let far = Instant::now() + Duration::from_secs(600);
            for deadline in [Deadline::none(), Deadline::at(far)] {
                let ran = run(&filter, to_val(&json!({"a": 1})), &[], &deadline);
                assert!(
                    matches!(&ran, Ok(Err(RunError::Jaq(text))) if text.contains("halted")),
                    "{program}: {ran:?}"
                );
            }
        }
    }
}
