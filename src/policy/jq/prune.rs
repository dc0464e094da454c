//! The jq definitions and native filters (jaq-core's, jaq-std's and
//! jaq-json's) one program needs: those it calls, and those they call in turn.
//!
//! jaq compiles every definition it is given into the program, used or not,
//! and keeps every native filter it is given: about 200 KiB carried by every
//! distinct expression. Giving it only the definitions reachable from the program
//! keeps a compiled `path(.spec.replicas)` to a few KiB, so 2,000
//! Applications with an expression of their own each stay well inside the
//! chart's memory limit. Reachability is by name, any arity, and over-counts
//! at worst (a parameter or local definition that shares a name with a
//! standard one pulls that one in), so no program loses a definition it
//! calls: an undefined name stays the compiler's error to report.

use std::collections::BTreeSet;
use std::sync::LazyLock;

use jaq_core::load::parse::{BinaryOp, Def, Pattern, Term};
use jaq_core::load::{Lexer, Parser, lex::StrPart};
use jaq_core::path::Part;

/// Every definition, in jaq's order (a definition calls only earlier ones
/// or itself), with the names its body calls.
static DEFINITIONS: LazyLock<Vec<(Def, BTreeSet<&'static str>)>> = LazyLock::new(|| {
    jaq_core::defs()
        .chain(jaq_std::defs())
        .chain(jaq_json::defs())
        .map(|def| {
            let mut calls = BTreeSet::new();
            collect_calls(&def.body, &mut calls);
            (def, calls)
        })
        .collect()
});

/// What one program needs.
pub struct Needed {
    /// The definitions, in jaq's order.
    pub defs: Vec<Def>,
    /// Every name called, by the program or a definition it needs; `None`
    /// for all of them.
    names: Option<BTreeSet<String>>,
}

impl Needed {
    /// Whether the native filter `name` may be called.
    pub fn calls(&self, name: &str) -> bool {
        self.names.as_ref().is_none_or(|n| n.contains(name))
    }
}

/// What `code` needs; everything when `code` does not parse (the loader
/// then reports why).
pub fn needed_by(code: &str) -> Needed {
    let Some(mut wanted) = calls_in(code) else {
        return Needed {
            defs: DEFINITIONS.iter().map(|(def, _)| def.clone()).collect(),
            names: None,
        };
    };
    // Definitions call earlier ones, so one pass from the end mostly
    // suffices; repeat until nothing is added rather than rely on it.
    let mut keep = vec![false; DEFINITIONS.len()];
    loop {
        let before = wanted.len();
        for (i, (def, calls)) in DEFINITIONS.iter().enumerate().rev() {
            if !keep[i] && wanted.contains(def.name) {
                keep[i] = true;
                wanted.extend(calls.iter().map(|c| c.to_string()));
            }
        }
        if wanted.len() == before {
            break;
        }
    }
    let defs = DEFINITIONS
        .iter()
        .zip(keep)
        .filter(|(_, keep)| *keep)
        .map(|((def, _), _)| def.clone())
        .collect();
    Needed {
        defs,
        names: Some(wanted),
    }
}

/// The names `code` calls, or `None` when it does not lex or parse.
fn calls_in(code: &str) -> Option<BTreeSet<String>> {
    let tokens = Lexer::new(code).lex().ok()?;
    let term = Parser::new(&tokens).parse(|p| p.term()).ok()?;
    let mut calls = BTreeSet::new();
    collect_calls(&term, &mut calls);
    Some(calls.into_iter().map(str::to_owned).collect())
}

fn collect_calls<'s>(term: &Term<&'s str>, calls: &mut BTreeSet<&'s str>) {
    match term {
        Term::Id | Term::Recurse | Term::Num(_) | Term::Break(_) | Term::Var(_) => {}
        Term::Str(format, parts) => {
            // `@base64 "..."` calls the format's filter.
            calls.extend(format.iter().copied());
            for part in parts {
                if let StrPart::Term(t) = part {
                    collect_calls(t, calls);
                }
            }
        }
        Term::Arr(inner) => inner.iter().for_each(|t| collect_calls(t, calls)),
        Term::Obj(entries) => {
            for (key, value) in entries {
                collect_calls(key, calls);
                value.iter().for_each(|v| collect_calls(v, calls));
            }
        }
        Term::Neg(t) | Term::Label(_, t) => collect_calls(t, calls),
        Term::BinOp(l, op, r) => {
            if let BinaryOp::Pipe(Some(pattern)) = op {
                pattern_calls(pattern, calls);
            }
            collect_calls(l, calls);
            collect_calls(r, calls);
        }
        Term::Fold(_, xs, pattern, args) => {
            collect_calls(xs, calls);
            pattern_calls(pattern, calls);
            args.iter().for_each(|t| collect_calls(t, calls));
        }
        Term::TryCatch(body, catch) => {
            collect_calls(body, calls);
            catch.iter().for_each(|t| collect_calls(t, calls));
        }
        Term::IfThenElse(branches, otherwise) => {
            for (cond, then) in branches {
                collect_calls(cond, calls);
                collect_calls(then, calls);
            }
            otherwise.iter().for_each(|t| collect_calls(t, calls));
        }
        Term::Def(defs, rest) => {
            defs.iter().for_each(|d| collect_calls(&d.body, calls));
            collect_calls(rest, calls);
        }
        Term::Call(name, args) => {
            calls.insert(name);
            args.iter().for_each(|t| collect_calls(t, calls));
        }
        Term::Path(head, path) => {
            collect_calls(head, calls);
            for (part, _) in &path.0 {
                match part {
                    Part::Index(i) => collect_calls(i, calls),
                    Part::Range(from, to) => {
                        from.iter().for_each(|t| collect_calls(t, calls));
                        to.iter().for_each(|t| collect_calls(t, calls));
                    }
                }
            }
        }
    }
}

fn pattern_calls<'s>(pattern: &Pattern<&'s str>, calls: &mut BTreeSet<&'s str>) {
    match pattern {
        Pattern::Var(_) => {}
        Pattern::Arr(items) => items.iter().for_each(|p| pattern_calls(p, calls)),
        Pattern::Obj(entries) => {
            for (key, value) in entries {
                collect_calls(key, calls);
                pattern_calls(value, calls);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(code: &str) -> Vec<&'static str> {
        needed_by(code).defs.iter().map(|d| d.name).collect()
    }

    #[test]
    fn a_plain_path_needs_no_definition() {
        assert!(names("path(\n.spec.replicas\n)").is_empty());
        let needed = needed_by("path(\n.spec.replicas\n)");
        assert!(needed.calls("path"));
        assert!(!needed.calls("test"));
    }

    #[test]
    fn callees_come_along_in_order() {
        let kept = names(".spec.containers[] | select(.name | test(\"^side\")) | .image");
        assert!(kept.contains(&"select"), "{kept:?}");
        assert!(kept.contains(&"test"), "{kept:?}");
        // Far fewer than all of them.
        assert!(kept.len() * 4 < DEFINITIONS.len(), "{kept:?}");
        // Each definition's callees are kept as well.
        for (def, calls) in DEFINITIONS.iter() {
            if kept.contains(&def.name) {
                for call in calls {
                    let defined = DEFINITIONS.iter().any(|(d, _)| d.name == *call);
                    assert!(!defined || kept.contains(call), "{} calls {call}", def.name);
                }
            }
        }
    }

    #[test]
    fn code_that_does_not_parse_gets_everything() {
        let needed = needed_by(".a | (");
        assert_eq!(needed.defs.len(), DEFINITIONS.len());
        assert!(needed.calls("test"));
    }
}
