//! The builtins the subset knows: those that terminate when their arguments
//! do, and those refused, grouped by why.

use jaq_core::load::parse::{BinaryOp, Term};
use jaq_core::path::Part;

/// Builtins known to terminate when their arguments do, with their arities.
pub(in crate::policy::jq) const BUILTINS: &[(&str, &[usize])] = &[
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
pub(super) const GROWS: &[&str] = &[
    "sub", "gsub", "join", "tojson", "implode", "ascii", "tostream",
];

/// Builtins that build a value up to a few times their input's size
/// (`to_entries` wraps each entry, `map(f)` repeats what `f` yields): each
/// may appear at most [`MAX_BUILDS`](super::MAX_BUILDS) times, so a chain of them cannot grow
/// a value exponentially.
pub(super) const BUILDS: &[&str] = &[
    "to_entries",
    "from_entries",
    "with_entries",
    "map",
    "map_values",
    "group_by",
    "unique_by",
];

/// Builtins that yield at most one value when their arguments do (or, for
/// `first`, `last`, `isempty`, `any` and `all`, whatever their arguments).
pub(super) const SINGLE: &[&str] = &[
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
pub(super) const SINGLE_WHATEVER: &[&str] = &["first", "last", "isempty", "any", "all"];

/// Whether `t` yields at most one value per input.
pub(super) fn single(t: &Term<&str>) -> bool {
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
pub(super) const UNBOUNDED: &[&str] = &["range", "repeat", "while", "until", "limit", "recurse"];
/// Builtins that read or act outside the object.
pub(super) const OUTSIDE: &[&str] = &[
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
