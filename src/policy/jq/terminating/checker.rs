//! The walk over jaq's syntax tree: every construct is allowed, refused
//! with its offset, or walked into.

use jaq_core::load::lex::StrPart;
use jaq_core::load::parse::{BinaryOp, Pattern, Term};
use jaq_core::ops::Math;
use jaq_core::path::Part;

use super::builtins::{BUILDS, BUILTINS, GROWS, OUTSIDE, UNBOUNDED, single};
use super::{MAX_BUILDS, MAX_DEPTH, MAX_PARTS, Reason, Refusal, offset_in};

/// A step of the iterative walk over a chain of binary operators.
enum Step<'a, 's> {
    Term(&'a Term<&'s str>),
    Op(&'a BinaryOp<&'s str>),
    /// `l + r`, checked once `l` has been seen (so the offset is right).
    Add(&'a Term<&'s str>, &'a Term<&'s str>),
    Bind(&'a Pattern<&'s str>),
    Unbind(usize),
}

pub(super) struct Checker<'s> {
    pub(super) code: &'s str,
    /// Leaf tokens with their offsets, to place constructs the tree keeps no
    /// text for (operators, `def`, `label`).
    pub(super) tokens: Vec<(usize, &'s str)>,
    pub(super) bound: Vec<&'s str>,
    /// End of the last text seen; the walk goes in source order.
    pub(super) cursor: usize,
    /// Terms and operators seen, against [`MAX_PARTS`].
    pub(super) parts: usize,
    /// [`BUILDS`] calls seen, against [`MAX_BUILDS`].
    pub(super) builds: usize,
}

impl<'s> Checker<'s> {
    fn see(&mut self, s: &'s str) -> usize {
        let offset = offset_in(self.code, s);
        self.cursor = self.cursor.max(offset + s.len());
        offset
    }

    /// The first token `text` at or after the cursor (or the last before
    /// `before`, for keywords that precede a named part).
    fn token_after(&self, text: &str) -> usize {
        self.tokens
            .iter()
            .find(|(o, t)| *o >= self.cursor && *t == text)
            .map_or(self.cursor, |(o, _)| *o)
    }

    fn token_before(&self, text: &str, before: usize) -> usize {
        self.tokens
            .iter()
            .rev()
            .find(|(o, t)| *o < before && *t == text)
            .map_or(before, |(o, _)| *o)
    }

    fn refuse(offset: usize, reason: Reason) -> Result<(), Refusal> {
        Err(Refusal { offset, reason })
    }

    /// Checks `t`. Chains of binary operators are walked with an explicit
    /// stack, so a long `a | b | c ...` or `a, b, c ...` does not count as depth.
    pub(super) fn term(&mut self, t: &Term<&'s str>, depth: usize) -> Result<(), Refusal> {
        if depth > MAX_DEPTH {
            return Self::refuse(self.cursor, Reason::TooDeep);
        }
        let mut stack = vec![Step::Term(t)];
        while let Some(step) = stack.pop() {
            let counts = match step {
                Step::Term(t) => !matches!(t, Term::BinOp(..)),
                Step::Op(_) | Step::Add(..) | Step::Bind(_) => true,
                Step::Unbind(_) => false,
            };
            if counts {
                self.parts += 1;
                if self.parts > MAX_PARTS {
                    return Self::refuse(self.cursor, Reason::TooBig);
                }
            }
            match step {
                Step::Term(Term::BinOp(l, op, r)) => {
                    match op {
                        BinaryOp::Pipe(Some(pattern)) => {
                            stack.push(Step::Unbind(self.bound.len()));
                            stack.push(Step::Term(r));
                            stack.push(Step::Bind(pattern));
                        }
                        BinaryOp::Math(Math::Add) => {
                            stack.push(Step::Term(r));
                            stack.push(Step::Add(l, r));
                        }
                        _ => {
                            stack.push(Step::Term(r));
                            stack.push(Step::Op(op));
                        }
                    }
                    stack.push(Step::Term(l));
                }
                Step::Term(other) => self.leaf(other, depth)?,
                Step::Op(op) => self.op(op)?,
                // Adding a literal grows a value by at most the expression's
                // length; adding two computed values can double it.
                Step::Add(l, r) if !is_literal(l) && !is_literal(r) => {
                    return Self::refuse(self.token_after("+"), Reason::Grows("+".to_owned()));
                }
                Step::Add(..) => {}
                Step::Bind(pattern) => self.bind(pattern, depth)?,
                Step::Unbind(len) => self.bound.truncate(len),
            }
        }
        Ok(())
    }

    fn op(&mut self, op: &BinaryOp<&'s str>) -> Result<(), Refusal> {
        let (text, arith) = match op {
            BinaryOp::Pipe(_)
            | BinaryOp::Comma
            | BinaryOp::Alt
            | BinaryOp::Or
            | BinaryOp::And
            | BinaryOp::Cmp(_)
            | BinaryOp::Math(Math::Add | Math::Sub) => return Ok(()),
            BinaryOp::Math(Math::Mul) => ("*", true),
            BinaryOp::Math(Math::Div) => ("/", true),
            BinaryOp::Math(Math::Rem) => ("%", true),
            BinaryOp::Assign => ("=", false),
            BinaryOp::Update => ("|=", false),
            BinaryOp::UpdateAlt => ("//=", false),
            BinaryOp::UpdateMath(m) => (
                match m {
                    Math::Add => "+=",
                    Math::Sub => "-=",
                    Math::Mul => "*=",
                    Math::Div => "/=",
                    Math::Rem => "%=",
                },
                false,
            ),
        };
        let offset = self.token_after(text);
        Self::refuse(
            offset,
            if arith {
                Reason::Arithmetic(text)
            } else {
                Reason::Update(text)
            },
        )
    }

    fn bind(&mut self, pattern: &Pattern<&'s str>, depth: usize) -> Result<(), Refusal> {
        if depth > MAX_DEPTH {
            return Self::refuse(self.cursor, Reason::TooDeep);
        }
        match pattern {
            Pattern::Var(x) => {
                self.see(x);
                self.bound.push(x);
            }
            Pattern::Arr(items) => {
                for p in items {
                    self.bind(p, depth + 1)?;
                }
            }
            Pattern::Obj(entries) => {
                for (key, p) in entries {
                    self.term(key, depth + 1)?;
                    self.bind(p, depth + 1)?;
                }
            }
        }
        Ok(())
    }

    fn leaf(&mut self, t: &Term<&'s str>, depth: usize) -> Result<(), Refusal> {
        let depth = depth + 1;
        match t {
            Term::Id | Term::Recurse | Term::Arr(None) => Ok(()),
            Term::Num(n) => {
                self.see(n);
                Ok(())
            }
            Term::Str(Some(fmt), _) => {
                let offset = self.see(fmt);
                Self::refuse(offset, Reason::Format((*fmt).to_owned()))
            }
            Term::Str(None, parts) => self.string(parts),
            Term::Arr(Some(_)) => {
                Self::refuse(self.token_after("["), Reason::Grows("[...]".to_owned()))
            }
            Term::Obj(entries) if entries.is_empty() => Ok(()),
            Term::Obj(_) => Self::refuse(self.token_after("{"), Reason::Grows("{...}".to_owned())),
            Term::Neg(t) => self.term(t, depth),
            Term::BinOp(..) => self.term(t, depth),
            Term::Label(..) | Term::Break(_) | Term::Fold(..) | Term::Def(..) => self.unbounded(t),
            Term::TryCatch(body, catch) => {
                self.term(body, depth)?;
                catch.as_deref().map_or(Ok(()), |c| self.term(c, depth))
            }
            Term::IfThenElse(branches, otherwise) => {
                for (cond, then) in branches {
                    self.term(cond, depth)?;
                    self.term(then, depth)?;
                }
                otherwise.as_deref().map_or(Ok(()), |e| self.term(e, depth))
            }
            Term::Var(x) => {
                let offset = self.see(x);
                if OUTSIDE.contains(x) {
                    Self::refuse(offset, Reason::Outside((*x).to_owned()))
                } else if self.bound.contains(x) {
                    Ok(())
                } else {
                    Self::refuse(offset, Reason::UnboundVariable((*x).to_owned()))
                }
            }
            Term::Call(name, args) => self.call_term(name, args, depth),
            Term::Path(head, path) => {
                self.term(head, depth)?;
                for (part, _) in &path.0 {
                    match part {
                        Part::Index(i) => self.term(i, depth)?,
                        Part::Range(from, to) => {
                            for t in [from, to].into_iter().flatten() {
                                self.term(t, depth)?;
                            }
                        }
                    }
                }
                Ok(())
            }
        }
    }

    /// A string without a format: its text is fine, an interpolation grows.
    fn string(&mut self, parts: &[StrPart<&'s str, Term<&'s str>>]) -> Result<(), Refusal> {
        for part in parts {
            match part {
                StrPart::Str(s) => {
                    self.see(s);
                }
                StrPart::Term(_) => {
                    let offset = self.token_after("\\(");
                    return Self::refuse(offset, Reason::Grows("string interpolation".to_owned()));
                }
                StrPart::Char(_) => {}
            }
        }
        Ok(())
    }

    /// `label`, `break`, `reduce`, `foreach` and `def`: refused, placed at
    /// their keyword.
    fn unbounded(&mut self, t: &Term<&'s str>) -> Result<(), Refusal> {
        match t {
            Term::Label(x, _) | Term::Break(x) => {
                let keyword = if matches!(t, Term::Label(..)) {
                    "label"
                } else {
                    "break"
                };
                let at = offset_in(self.code, x);
                Self::refuse(
                    self.token_before(keyword, at),
                    Reason::Unbounded(keyword.to_owned()),
                )
            }
            Term::Fold(keyword, ..) => {
                let offset = self.see(keyword);
                Self::refuse(offset, Reason::Unbounded((*keyword).to_owned()))
            }
            Term::Def(defs, _) => {
                let at = defs
                    .first()
                    .map_or(self.cursor, |d| offset_in(self.code, d.name));
                Self::refuse(
                    self.token_before("def", at),
                    Reason::Unbounded("def".to_owned()),
                )
            }
            _ => Ok(()),
        }
    }

    /// A builtin's call: allowed with its arity, within [`MAX_BUILDS`], and
    /// `map` and `with_entries` of one value per element; then its arguments.
    fn call_term(
        &mut self,
        name: &'s str,
        args: &[Term<&'s str>],
        depth: usize,
    ) -> Result<(), Refusal> {
        let offset = self.see(name);
        self.call(name, args.len(), offset)?;
        if BUILDS.contains(&name) {
            self.builds += 1;
            if self.builds > MAX_BUILDS {
                return Self::refuse(offset, Reason::TooManyBuilds(name.to_owned()));
            }
        }
        if matches!(name, "map" | "with_entries") && !args.iter().all(single) {
            return Self::refuse(
                offset,
                Reason::Grows(format!("{name} of more than one value per element")),
            );
        }
        for arg in args {
            self.term(arg, depth)?;
        }
        Ok(())
    }

    fn call(&self, name: &str, arity: usize, offset: usize) -> Result<(), Refusal> {
        let allowed = BUILTINS
            .iter()
            .any(|(n, arities)| *n == name && arities.contains(&arity));
        if allowed {
            return Ok(());
        }
        let construct = match (name, arity) {
            (n, 0) => n.to_owned(),
            ("recurse", 1) => "recurse(f)".to_owned(),
            ("recurse", _) => "recurse(f; cond)".to_owned(),
            (n, _) if BUILTINS.iter().any(|(b, _)| *b == n) => {
                format!(
                    "{n} with {arity} argument{}",
                    if arity == 1 { "" } else { "s" }
                )
            }
            (n, _) => n.to_owned(),
        };
        let reason = if name.starts_with('@') {
            Reason::Format(construct)
        } else if GROWS.contains(&name) {
            Reason::Grows(construct)
        } else if UNBOUNDED.contains(&name) {
            Reason::Unbounded(construct)
        } else if OUTSIDE.contains(&name) {
            Reason::Outside(construct)
        } else {
            Reason::NotAllowListed(construct)
        };
        Self::refuse(offset, reason)
    }
}

/// A constant: numbers, strings without interpolation, `null`, `true`,
/// `false`, `[]` and `{}`.
fn is_literal(t: &Term<&str>) -> bool {
    match t {
        Term::Num(_) | Term::Arr(None) => true,
        Term::Str(None, parts) => parts.iter().all(|p| !matches!(p, StrPart::Term(_))),
        Term::Obj(entries) => entries.is_empty(),
        Term::Neg(t) => is_literal(t),
        Term::Call(name, args) => args.is_empty() && matches!(*name, "null" | "true" | "false"),
        _ => false,
    }
}
