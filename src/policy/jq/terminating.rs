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
use jaq_core::load::parse::{BinaryOp, Pattern, Term};
use jaq_core::load::{Lexer, Parser};
use jaq_core::ops::Math;
use jaq_core::path::Part;

/// Longer expressions are refused: no real rule is this long, and it bounds
/// every scan and jaq's recursion over operator chains.
pub const MAX_LEN: usize = 4096;
/// Deeper nesting is refused, so that neither this check nor jaq recurses
/// without bound. `|`, `,` and the other binary operators do not nest.
pub const MAX_DEPTH: usize = 64;

/// More parts are refused: jaq compiles and runs an expression recursively, on
/// the caller's (tokio worker's) stack, so its size must be bounded too. The
/// program run has up to twice as many (its checkpoints, [`super::ticks`]).
pub const MAX_PARTS: usize = 128;

const ALLOWED: &str =
    "allowed: field access, [], |, ',', select(...), comparisons, keys, has, test, ...";

/// Builtins known to terminate when their arguments do, with their arities.
pub(super) const BUILTINS: &[(&str, &[usize])] = &[
    ("empty", &[0]),
    ("error", &[0, 1]),
    ("null", &[0]),
    ("true", &[0]),
    ("false", &[0]),
    ("not", &[0]),
    ("select", &[1]),
    ("recurse", &[0]),
    ("keys", &[0]),
    ("keys_unsorted", &[0]),
    ("has", &[1]),
    ("in", &[1]),
    ("contains", &[1]),
    ("inside", &[1]),
    ("startswith", &[1]),
    ("endswith", &[1]),
    ("ltrimstr", &[1]),
    ("rtrimstr", &[1]),
    ("trim", &[0]),
    ("ltrim", &[0]),
    ("rtrim", &[0]),
    // jaq's regular expressions run in linear time.
    ("test", &[1, 2]),
    ("match", &[1, 2]),
    ("capture", &[1, 2]),
    ("splits", &[1, 2]),
    ("split", &[1]),
    ("length", &[0]),
    ("utf8bytelength", &[0]),
    ("type", &[0]),
    ("to_entries", &[0]),
    ("from_entries", &[0]),
    ("with_entries", &[1]),
    ("map", &[1]),
    ("map_values", &[1]),
    ("any", &[0, 1, 2]),
    ("all", &[0, 1, 2]),
    ("first", &[0, 1]),
    ("last", &[0, 1]),
    ("isempty", &[1]),
    ("ascii_downcase", &[0]),
    ("ascii_upcase", &[0]),
    ("tostring", &[0]),
    ("tonumber", &[0]),
    ("fromjson", &[0]),
    ("values", &[0]),
    ("nulls", &[0]),
    ("strings", &[0]),
    ("numbers", &[0]),
    ("booleans", &[0]),
    ("arrays", &[0]),
    ("objects", &[0]),
    ("iterables", &[0]),
    ("scalars", &[0]),
    ("paths", &[0]),
    ("getpath", &[1]),
    ("add", &[0]),
    ("index", &[1]),
    ("rindex", &[1]),
    ("indices", &[1]),
    ("unique", &[0]),
    ("sort", &[0]),
    ("min", &[0]),
    ("max", &[0]),
    ("reverse", &[0]),
    ("sort_by", &[1]),
    ("unique_by", &[1]),
    ("group_by", &[1]),
    ("min_by", &[1]),
    ("max_by", &[1]),
];

/// Builtins whose output can be longer than their input, so that a chain of
/// them grows a value exponentially (`tojson|tojson|…` doubles backslashes,
/// `gsub("a"; "aa")` doubles a string). They terminate, but could exhaust
/// memory before the decision deadline, which bounds only time.
const GROWS: &[&str] = &[
    "sub", "gsub", "join", "tojson", "implode", "ascii", "tostream",
];

/// Builtins that build a value up to a few times their input's size
/// (`to_entries` wraps each entry, `map(f)` repeats what `f` yields): each
/// may appear at most [`MAX_BUILDS`] times, so a chain of them cannot grow
/// a value exponentially.
const BUILDS: &[&str] = &[
    "to_entries",
    "from_entries",
    "with_entries",
    "map",
    "map_values",
    "group_by",
    "unique_by",
];
/// At most this many [`BUILDS`] calls in one expression.
pub const MAX_BUILDS: usize = 3;

/// Builtins that yield at most one value when their arguments do (or, for
/// `first`, `last`, `isempty`, `any` and `all`, whatever their arguments).
const SINGLE: &[&str] = &[
    "empty",
    "error",
    "null",
    "true",
    "false",
    "not",
    "select",
    "keys",
    "keys_unsorted",
    "has",
    "in",
    "contains",
    "inside",
    "startswith",
    "endswith",
    "ltrimstr",
    "rtrimstr",
    "trim",
    "ltrim",
    "rtrim",
    "test",
    "split",
    "length",
    "utf8bytelength",
    "type",
    "to_entries",
    "from_entries",
    "with_entries",
    "map",
    "map_values",
    "ascii_downcase",
    "ascii_upcase",
    "tostring",
    "tonumber",
    "fromjson",
    "values",
    "nulls",
    "strings",
    "numbers",
    "booleans",
    "arrays",
    "objects",
    "iterables",
    "scalars",
    "getpath",
    "add",
    "index",
    "rindex",
    "indices",
    "unique",
    "sort",
    "min",
    "max",
    "reverse",
    "sort_by",
    "unique_by",
    "group_by",
    "min_by",
    "max_by",
];
const SINGLE_WHATEVER: &[&str] = &["first", "last", "isempty", "any", "all"];

/// Whether `t` yields at most one value per input.
fn single(t: &Term<&str>) -> bool {
    match t {
        Term::Id | Term::Num(_) | Term::Str(..) | Term::Var(_) | Term::Arr(None) | Term::Obj(_) => {
            true
        }
        Term::Neg(t) => single(t),
        Term::Path(head, path) => {
            single(head)
                && path
                    .0
                    .iter()
                    .all(|(part, _)| matches!(part, Part::Index(i) if single(i)))
        }
        Term::BinOp(l, op, r) => !matches!(op, BinaryOp::Comma) && single(l) && single(r),
        Term::IfThenElse(branches, otherwise) => {
            branches.iter().all(|(c, t)| single(c) && single(t))
                && otherwise.as_deref().is_none_or(single)
        }
        Term::TryCatch(body, catch) => single(body) && catch.as_deref().is_none_or(single),
        Term::Call(name, args) => {
            SINGLE_WHATEVER.contains(name) || (SINGLE.contains(name) && args.iter().all(single))
        }
        _ => false,
    }
}

/// Builtins that loop, or exist to cut loops short.
const UNBOUNDED: &[&str] = &["range", "repeat", "while", "until", "limit", "recurse"];
/// Builtins that read or act outside the object.
const OUTSIDE: &[&str] = &[
    "input",
    "inputs",
    "env",
    "now",
    "input_filename",
    "input_line_number",
    "halt",
    "halt_error",
    "debug",
    "stderr",
    "$ENV",
    "$__loc__",
];

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

/// A step of the iterative walk over a chain of binary operators.
enum Step<'a, 's> {
    Term(&'a Term<&'s str>),
    Op(&'a BinaryOp<&'s str>),
    /// `l + r`, checked once `l` has been seen (so the offset is right).
    Add(&'a Term<&'s str>, &'a Term<&'s str>),
    Bind(&'a Pattern<&'s str>),
    Unbind(usize),
}

struct Checker<'s> {
    code: &'s str,
    /// Leaf tokens with their offsets, to place constructs the tree keeps no
    /// text for (operators, `def`, `label`).
    tokens: Vec<(usize, &'s str)>,
    bound: Vec<&'s str>,
    /// End of the last text seen; the walk goes in source order.
    cursor: usize,
    /// Terms and operators seen, against [`MAX_PARTS`].
    parts: usize,
    /// [`BUILDS`] calls seen, against [`MAX_BUILDS`].
    builds: usize,
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
    fn term(&mut self, t: &Term<&'s str>, depth: usize) -> Result<(), Refusal> {
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
            Term::Id | Term::Recurse => Ok(()),
            Term::Num(n) => {
                self.see(n);
                Ok(())
            }
            Term::Str(Some(fmt), _) => {
                let offset = self.see(fmt);
                Self::refuse(offset, Reason::Format((*fmt).to_owned()))
            }
            Term::Str(None, parts) => {
                for part in parts {
                    match part {
                        StrPart::Str(s) => {
                            self.see(s);
                        }
                        StrPart::Term(_) => {
                            let offset = self.token_after("\\(");
                            return Self::refuse(
                                offset,
                                Reason::Grows("string interpolation".to_owned()),
                            );
                        }
                        StrPart::Char(_) => {}
                    }
                }
                Ok(())
            }
            Term::Arr(None) => Ok(()),
            Term::Arr(Some(_)) => {
                Self::refuse(self.token_after("["), Reason::Grows("[...]".to_owned()))
            }
            Term::Obj(entries) if entries.is_empty() => Ok(()),
            Term::Obj(_) => Self::refuse(self.token_after("{"), Reason::Grows("{...}".to_owned())),
            Term::Neg(t) => self.term(t, depth),
            Term::BinOp(..) => self.term(t, depth),
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
            Term::Call(name, args) => {
                let offset = self.see(name);
                self.call(name, args.len(), offset)?;
                if BUILDS.contains(name) {
                    self.builds += 1;
                    if self.builds > MAX_BUILDS {
                        return Self::refuse(offset, Reason::TooManyBuilds((*name).to_owned()));
                    }
                }
                if matches!(*name, "map" | "with_entries") && !args.iter().all(single) {
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

    #[test]
    fn every_refused_construct_is_named_with_its_reason() {
        let unbounded = |w: &str| hint(&format!("`{w}` is not allowed: it can run without bound"));
        let cases: &[(&str, usize, String)] = &[
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
            (
                "input",
                0,
                hint("`input` is not allowed: it reads or acts outside the object"),
            ),
            (
                ".a, inputs",
                4,
                hint("`inputs` is not allowed: it reads or acts outside the object"),
            ),
            (
                ".[$__loc__.line]",
                2,
                hint("`$__loc__` is not allowed: it reads or acts outside the object"),
            ),
            (
                r#"."a" * 1e12"#,
                5,
                hint(
                    r#"`*` is not allowed: it can build values without bound, as `"a" * 1e12` does"#,
                ),
            ),
            (
                ". / 2",
                2,
                hint(
                    r#"`/` is not allowed: it can build values without bound, as `"a" * 1e12` does"#,
                ),
            ),
            (
                ".a % 2",
                3,
                hint(
                    r#"`%` is not allowed: it can build values without bound, as `"a" * 1e12` does"#,
                ),
            ),
            (
                ".a = 1",
                3,
                hint(
                    "`=` is not allowed: it rewrites values, and a jqPathExpression only selects paths",
                ),
            ),
            (
                ".a |= 1",
                3,
                hint(
                    "`|=` is not allowed: it rewrites values, and a jqPathExpression only selects paths",
                ),
            ),
            (
                ".a += 1",
                3,
                hint(
                    "`+=` is not allowed: it rewrites values, and a jqPathExpression only selects paths",
                ),
            ),
            (
                ".a //= 1",
                3,
                hint(
                    "`//=` is not allowed: it rewrites values, and a jqPathExpression only selects paths",
                ),
            ),
            (
                r#".a | @base64 "x\(.)""#,
                5,
                hint("`@base64` is not allowed: format strings are outside the terminating subset"),
            ),
            (
                ".a | @sh",
                5,
                hint("`@sh` is not allowed: format strings are outside the terminating subset"),
            ),
            (
                ".[$k]",
                2,
                hint("`$k` is not allowed: the variable is not bound in the expression"),
            ),
            (
                "(. as $k | .), $k",
                15,
                hint("`$k` is not allowed: the variable is not bound in the expression"),
            ),
            (
                "$ENV.HOME",
                0,
                hint("`$ENV` is not allowed: it reads or acts outside the object"),
            ),
            (
                ".a | walk(.)",
                5,
                hint("`walk` is not allowed: it is not a builtin known to terminate"),
            ),
            (
                "select(.a; .b)",
                0,
                hint(
                    "`select with 2 arguments` is not allowed: it is not a builtin known to terminate",
                ),
            ),
            (
                "some.jq.path.expr",
                0,
                hint("`some` is not allowed: it is not a builtin known to terminate"),
            ),
        ];
        for (code, offset, reason) in cases {
            assert_eq!(refused(code), (*offset, reason.clone()), "{code}");
        }
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
                    let _ = jq.paths(&crate::policy::jq::JqInput::new(&obj));
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
